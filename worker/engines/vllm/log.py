"""vLLM: the platform it detects, the device it is configured for, and the weights it loads.

vLLM names its platform (`Automatically detected platform cuda.`) and checks every platform
in turn: "ROCm platform is not available" on an NVIDIA node is routine and counts only while
no GPU platform has been found. On ROCm torch calls its devices "cuda" too, so
`device_config=cuda` never overrides a platform line.
"""

from __future__ import annotations

import re

from ...gpu.values import to_bytes
from ..evidence.rules import (
    NUMBER,
    add_device,
    backend_of,
    note_gpu_backend,
    note_gpu_failure,
    note_on_cpu,
)
from ..evidence.state import EvidenceState

_PLATFORM_DETECTED = re.compile(r"Automatically detected platform (\w+)\.")
_PLATFORM_CONFIRMED = re.compile(r"Confirmed (CUDA|ROCm) platform is available")
_PLATFORM_UNAVAILABLE = re.compile(r"\b(CUDA|ROCm) platform is not available because")
_NO_PLATFORM = re.compile(r"No platform detected, vLLM is running on UnspecifiedPlatform")
_DEVICE_CONFIG = re.compile(r"\bdevice_config=(\w+)(?::(\d{1,3}))?")
_KV_BLOCKS = re.compile(r"# (cuda|xpu) blocks: \d")
_WEIGHTS_LOADED = re.compile(
    rf"(?:Loading model weights took|Model loading took) ({NUMBER}) (GB|GiB)"
)
_WEIGHTS_TAKE = re.compile(rf"model weights take ({NUMBER})\s?GiB")


def read_vllm_line(ev: EvidenceState, text: str) -> bool:
    """Update `ev` from one cleaned line; True when the line is a finding, to be kept among
    the evidence's lines."""
    match = _PLATFORM_DETECTED.search(text)
    if match is not None:
        platform = match.group(1).lower()
        if platform == "cpu":
            note_on_cpu(ev)
            return True
        note_gpu_backend(ev, backend_of(platform), "use")
        return True
    match = _PLATFORM_CONFIRMED.search(text)
    if match is not None:
        note_gpu_backend(ev, backend_of(match.group(1)), "found")
        return True
    match = _PLATFORM_UNAVAILABLE.search(text)
    if match is not None:
        if ev.gpu_backend is not None and ev.gpu_failed is None:
            return False  # vLLM checks every platform; one was found already
        note_gpu_failure(ev, text, match.group(1))
        return True
    if _NO_PLATFORM.search(text):
        note_gpu_failure(ev, text, None, on_cpu=False)
        return True
    match = _DEVICE_CONFIG.search(text)
    if match is not None:
        device = match.group(1).lower()
        if device == "cpu":
            note_on_cpu(ev)
            return True
        if match.group(2) is not None:
            add_device(ev.devices, f"{device}:{match.group(2)}")
        note_gpu_backend(ev, backend_of(device), "found")
        return True
    match = _KV_BLOCKS.search(text)
    if match is not None:
        note_gpu_backend(ev, backend_of(match.group(1)), "found")
        return True
    match = _WEIGHTS_LOADED.search(text)
    if match is not None and "cpu_model_runner" not in text:
        size = to_bytes(f"{match.group(1)} {match.group(2)}")
        if size is None:
            return False
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

    banner = re.compile(r"\bvLLM API server version\b")
    before = re.compile(
        r"^(?:Checking if|Automatically detected|No platform detected|Platform plugin"
        r"|The vLLM package was not found|.*\bplatform is (?:not )?available)"
    )
    """Its platform detection, logged from vllm/platforms/__init__.py before the server."""
    words = (("server version",), ("platform", "vllm package"))
    keywords = ("platform", "weights", "model loading", "blocks", "device", "cuda", "rocm")
    prefixes = (
        r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?",
        r"\((?:VllmWorkerProcess|Worker\w*|EngineCore\w*|APIServer)\s+pid=\d{1,10}\)",
        r"\[?[\w/.-]{1,64}\.py:\d{1,6}\]",  # its source line
    )

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        return ("vllm", read_vllm_line(ev, text)) if is_vllm_format(line) else None

    def replaces(self, line: str, previous: str) -> bool:
        return False

    def listed_device(self, line: str) -> tuple[str, str] | None:
        return None


LOG = _Log()
