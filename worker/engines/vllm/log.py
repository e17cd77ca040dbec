"""vLLM: the platform it detects, the device it is configured for, where its KV cache went,
and the weights it loads.

vLLM names its platform (`Automatically detected platform cuda.`) and checks every platform
in turn: "ROCm platform is not available" on an NVIDIA node is routine and counts only while
no GPU platform has been found. On ROCm torch calls its devices "cuda" too, so
`device_config=cuda` never overrides a platform line.

Since about 0.11 the platform line is `logger.debug` (vllm/platforms/__init__.py), so a
default log no longer says it; what decides there (checked against 0.34.0, commit 62d4bc3c7,
tests/fixtures/engine-logs/vllm/README.md names each line's file):

- the engine's config line, `Initializing a V1 LLM engine (v0.34.0) with config: ...,
  device_config=cuda, ...` (`cuda` on ROCm too; `cpu`, `xpu`);
- where its KV cache went: `GPU KV cache size: 389,056 tokens` (`GPU` for a cuda device, else
  the device's type upper-cased: `CPU KV cache size`), the GPU worker's `Available KV cache
  memory: 53.43 GiB`, the CPU worker's `Auto set (26.18/62.70) GiB for KV cache on node 0`;
- `Model loading took 15.27 GiB memory`, printed by the CPU's model runner too (it subclasses
  the GPU's, same file and line), so it counts on a GPU only while nothing said the CPU.
"""

from __future__ import annotations

import re
from typing import Literal

from ...gpu.values import to_bytes
from ..evidence.rules import (
    NUMBER,
    add_device,
    note_gpu_backend,
    note_gpu_failure,
    note_on_cpu,
)
from ..evidence.state import EngineBackend, EvidenceState

_PLATFORM_DETECTED = re.compile(r"Automatically detected platform (\w+)\.")
_PLATFORM_CONFIRMED = re.compile(r"Confirmed (CUDA|ROCm) platform is available")
_PLATFORM_UNAVAILABLE = re.compile(r"\b(CUDA|ROCm) platform is not available because")
_NO_PLATFORM = re.compile(r"No platform detected, vLLM is running on UnspecifiedPlatform")
_DEVICE_CONFIG = re.compile(r"\bdevice_config=(\w+)(?::(\d{1,3}))?")
_KV_BLOCKS = re.compile(r"# (cuda|xpu) blocks: \d")
_KV_POOL = re.compile(r"^([A-Z]{2,8}) KV cache size: [\d,]{1,16} tokens")
_KV_GPU_MEMORY = re.compile(rf"^Available KV cache memory: {NUMBER} GiB")
_KV_CPU_MEMORY = re.compile(
    r"^(?:Auto|Explicitly) set \([\d.]{1,16}/[\d.]{1,16}\) GiB for KV cache"
)
_WEIGHTS_LOADED = re.compile(
    rf"(?:Loading model weights took|Model loading took) ({NUMBER}) (GB|GiB)"
)
_WEIGHTS_TAKE = re.compile(rf"model weights take ({NUMBER})\s?GiB")
_DEVICES: dict[str, EngineBackend] = {
    "cuda": "CUDA", "gpu": "CUDA", "rocm": "ROCm", "hip": "ROCm", "xpu": "SYCL", "cpu": "CPU",
}  # fmt: skip
"""vLLM's device and platform names: torch's `cuda` is NVIDIA's and ROCm's alike, and its KV
pool says `GPU` for it."""


def read_vllm_line(ev: EvidenceState, text: str) -> bool:
    """Update `ev` from one cleaned line; True when the line is a finding, to be kept among
    the evidence's lines."""
    found = _read_platform(ev, text)
    if found is not None:
        return found
    match = _DEVICE_CONFIG.search(text)
    if match is not None:
        if match.group(2) is not None and match.group(1).lower() != "cpu":
            add_device(ev.devices, f"{match.group(1).lower()}:{match.group(2)}")
        return _on_device(ev, match.group(1), "found")
    match = _KV_POOL.match(text) or _KV_BLOCKS.search(text)
    if match is not None:
        return _on_device(ev, match.group(1), "use")
    if _KV_GPU_MEMORY.match(text):
        return _on_device(ev, "gpu", "use")  # only vLLM's GPU worker says it
    if _KV_CPU_MEMORY.match(text):
        note_on_cpu(ev)
        return True
    return _read_weights(ev, text)


def _read_platform(ev: EvidenceState, text: str) -> bool | None:
    """The platform lines (DEBUG since about 0.11); None for any other line."""
    match = _PLATFORM_DETECTED.search(text)
    if match is not None:
        return _on_device(ev, match.group(1), "use")
    match = _PLATFORM_CONFIRMED.search(text)
    if match is not None:
        return _on_device(ev, match.group(1), "found")
    match = _PLATFORM_UNAVAILABLE.search(text)
    if match is not None:
        if ev.gpu_backend is not None and ev.gpu_failed is None:
            return False  # vLLM checks every platform; one was found already
        note_gpu_failure(ev, text, match.group(1))
        return True
    if _NO_PLATFORM.search(text):
        note_gpu_failure(ev, text, None, on_cpu=False)
        return True
    return None


def _on_device(ev: EvidenceState, name: str, strength: Literal["found", "use"]) -> bool:
    """The engine names its device or platform; a name it has no backend for is no finding."""
    backend = _DEVICES.get(name.lower())
    if backend is None:
        return False
    if backend == "CPU":
        note_on_cpu(ev)
    else:
        note_gpu_backend(ev, backend, strength)
    return True


def _read_weights(ev: EvidenceState, text: str) -> bool:
    match = _WEIGHTS_LOADED.search(text)
    if match is not None:
        size = to_bytes(f"{match.group(1)} {match.group(2)}")
        if size is None:
            return False
        if ev.backend == "CPU":  # vLLM's CPU model runner says it too
            ev.cpu_weight_bytes = (ev.cpu_weight_bytes or 0) + size
        else:
            ev.gpu_weight_bytes = (ev.gpu_weight_bytes or 0) + size  # one line per worker (TP)
        return True
    match = _WEIGHTS_TAKE.search(text)
    if match is not None and ev.gpu_weight_bytes is None:
        ev.gpu_weight_bytes = to_bytes(f"{match.group(1)} GiB")
        return True
    return False


_VLLM_LINE = re.compile(r"\w\.py:\d{1,6}\]")


def is_vllm_format(line: str) -> bool:
    """vLLM's logging format, which names the Python source line (`[__init__.py:256]`)."""
    return _VLLM_LINE.search(line) is not None


class _Log:
    """vLLM's logging lines."""

    banner = re.compile(r"\bvLLM (?:API )?server version\b|█\s{1,4}version \S")
    """Once per start, from its API server: the line of its ASCII logo that says its version
    (vllm/entrypoints/common/startup.py in 0.34.0; `vLLM server version 0.34.0, serving model
    ...` with VLLM_DISABLE_LOG_LOGO=1; `vLLM API server version` before about 0.10)."""
    before = re.compile(
        r"^(?:Checking if|Automatically detected|No platform detected|Platform plugin"
        r"|The vLLM package was not found|.*\bplatform is (?:not )?available)"
    )
    """Its platform detection, logged from vllm/platforms/__init__.py before the server."""
    words = (("version",), ("platform", "vllm package"))
    keywords = (
        "platform", "weights", "model loading", "blocks", "device", "cuda", "rocm", "kv cache",
    )  # fmt: skip
    prefixes = (
        r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?",
        r"\((?:VllmWorkerProcess|Worker\w*|EngineCore\w*|APIServer\w*)\s+pid=\d{1,10}\)",
        r"\[?[\w/.-]{1,64}\.py:\d{1,6}\]",  # its source line
    )

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        return ("vllm", read_vllm_line(ev, text)) if is_vllm_format(line) else None

    def replaces(self, line: str, previous: str) -> bool:
        return False

    def listed_device(self, line: str) -> tuple[str, str] | None:
        return None


LOG = _Log()
