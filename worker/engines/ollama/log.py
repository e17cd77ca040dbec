"""Ollama: its server's own logfmt lines, from discovery to the scheduler and the runners.

Since 0.30 a model runs in Ollama's build of llama-server, started with `-ngl` only where the
model's options set num_gpu (`-ngl 0`: the CPU) and `--log-verbosity 4`, its lines copied
into the server's log as they are: `msg="starting llama-server" cmd="..."` starts each one
(llm/llama_server.go at fb30760996871fa9460115c753afd2c60d4ab0f7), so it starts the life of
the evidence of the model it loads. The scheduler's plan, cudart and "falling back to CPU"
lines are gone there; `inference compute` and `gpu memory` (one per GPU given to a load)
remain.

Ollama's server log mixes its own logfmt lines (discovery: `inference compute ...
library=cuda|rocm|cpu`; the scheduler: `offload to cuda`, `msg=offload library=cpu
layers.offload=0`; runner command lines; 0.12's `load request ... GPULayers:15[...]`) with
the llama.cpp or ggml lines of its runners, which llama_cpp/log.py reads. Discovery tries
several libraries (cuda_v12, cuda_v13, rocm) and skips GPUs it cannot use, so a discovery failure
("Unable to load cudart library", "no compatible GPUs were discovered") is withdrawn when a
later line finds a GPU. A build whose only runner is the CPU one (`Dynamic LLM libraries
[cpu]`, as some distributions package it) can never find one.
"""

from __future__ import annotations

import re

from ...gpu.values import to_bytes
from ..evidence.rules import (
    BACKEND_PREFIXES,
    DEVICE,
    add_device,
    backend_of,
    is_host_buffer,
    note_gpu_backend,
    note_gpu_failure,
    note_layers,
    note_on_cpu,
    note_weights,
)
from ..evidence.state import EngineBackend, EvidenceState
from ..llama_cpp.log import read_llama_cpp_line

_KV = re.compile(r'([\w.]{1,64})=("[^"]{0,512}"|[^\s"]{0,512})')
_OFFLOAD_PLAN = re.compile(r'msg="?offload(?: to (\w+))?\b')
_OLLAMA_FAILED = re.compile(
    r"Unable to load (cudart) library|error initializing (cuda) driver library"
    r"|no compatible GPUs were discovered|unable to verify (rocm) library|falling back to CPU"
    r"|skipping (CUDA) device|insufficient VRAM to load any model layers"
    r'|GPU discovery watchdog timed out|compatible gpu libraries" compatible=\[\]'
)
_DYNAMIC = re.compile(r"Dynamic LLM libraries\"?\s*(?:runners=)?\"?\[([^\]]{0,200})\]")
_RUNNER_CMD = re.compile(r'msg="starting (llama server|runner|llama-server)" cmd="([^"]{0,4096})')
_RUNNER_LIB = re.compile(r"[/\\]runners[/\\]([a-z]+)")
_NGL = re.compile(r"(?:^|\s)(?:--n-gpu-layers|-ngl) (\d{1,5})\b")
_GPU_LAYERS = re.compile(r"GPULayers:(\d{0,5})\[([^\]]{0,2048})\]")
_LAYERS_ON = re.compile(r"Layers:(\d{1,5})")
_ID_ON = re.compile(r"ID:([\w-]{1,64})")
_WILL_FIT = re.compile(r"new model will fit in available VRAM")
_MODEL_WEIGHTS = re.compile(r'msg="model weights" (?:buffer|device)=(\S{1,64}) size="([^"]{1,32})"')
_COMPUTE_GRAPH = re.compile(r'msg="compute graph" backend=(\S{1,64})')
_SYSTEM = re.compile(r"\bmsg=system\b.*?\b(CUDA|ROCm|Vulkan|Metal|SYCL)\.\d")
_CUDART = re.compile(r"Nvidia GPU detected via cudart|\[cudart\] CUDART CUDA Compute Capability")


def _logfmt(text: str) -> dict[str, str]:
    """A logfmt line's fields, their quotes taken off."""
    return {k: v.strip('"') for k, v in _KV.findall(text)}


def _device_name(kv: dict[str, str], backend: EngineBackend | None) -> str | None:
    """The GPU a discovery or scheduler line names: by ggml's name, its UUID, or its index."""
    name, ident = kv.get("name", ""), kv.get("id", "") or kv.get("gpu", "")
    if DEVICE.fullmatch(name) and name[-1].isdigit():
        return name  # 0.12+: name=CUDA0
    if ident.startswith("GPU-"):
        return ident
    if ident.isdigit() and backend is not None and backend != "CPU":
        return f"{backend}{ident}"
    return None


def read_ollama_line(ev: EvidenceState, text: str, low: str) -> bool:
    """Update `ev` from one cleaned line (`low` is the raw line lowercased); True when the
    line is a finding, to be kept among the evidence's lines."""
    match = _OLLAMA_FAILED.search(text)
    if match is not None:
        note_gpu_failure(ev, text, next((g for g in match.groups() if g), None))
        return True
    if "inference compute" in text:
        return _read_inference_compute(ev, _logfmt(text))
    if "offload" in low and "layers.offload=" in text:
        return _read_offload_plan(ev, text)
    match = _DYNAMIC.search(text)
    if match is not None:
        runners = match.group(1).replace('"', "").split()
        if runners and all(r.startswith("cpu") for r in runners):
            note_gpu_failure(ev, text, None)  # a build with no GPU runner at all
            return True
        return False
    match = _RUNNER_CMD.search(text)
    if match is not None:  # since 0.30 the model's own process starts: a finding whatever else
        return _read_runner_cmd(ev, match.group(2)) or match.group(1) == "llama-server"
    match = _GPU_LAYERS.search(text)
    if match is not None:
        return _read_load_request(ev, match.group(1), match.group(2))
    return _read_placement(ev, text, low)


def _read_offload_plan(ev: EvidenceState, text: str) -> bool:
    """The scheduler's plan: `offload to cuda ... layers.model=33 layers.offload=33`, or
    `msg=offload library=cpu ... layers.offload=0`."""
    match = _OFFLOAD_PLAN.search(text)
    kv = _logfmt(text)
    library = (match.group(1) if match else None) or kv.get("library", "")
    offload, model = kv.get("layers.offload", ""), kv.get("layers.model", "")
    if not (offload.isdigit() and model.isdigit()):
        return False
    if not note_layers(ev, int(offload), int(model)):
        return False
    if int(offload) > 0:
        note_gpu_backend(ev, backend_of(library), "use")
    return True


def _read_inference_compute(ev: EvidenceState, kv: dict[str, str]) -> bool:
    """Ollama's discovery result, one line per device (or one `library=cpu` line)."""
    library = kv.get("library", "").lower()
    if not library:
        library = next((b for b, _ in BACKEND_PREFIXES if b in kv.get("libdirs", "")), "")
    if library == "cpu":
        if ev.gpu_backend is None and ev.backend is None:
            note_on_cpu(ev)
            return True
        return False
    backend = backend_of(library)
    if backend is None:
        return False
    device = _device_name(kv, backend)
    if device is not None:
        add_device(ev.found_devices, device)
    note_gpu_backend(ev, backend, "found")
    return True


def _read_runner_cmd(ev: EvidenceState, cmd: str) -> bool:
    """The runner Ollama starts: which build (runners/cpu_avx2, runners/cuda_v12) and its
    --n-gpu-layers, whose total the scheduler's plan said before it."""
    found = False
    runner = _RUNNER_LIB.search(cmd)
    if runner is not None:
        if runner.group(1) == "cpu":
            note_on_cpu(ev)  # runners/cpu*/ollama_llama_server can only compute on the CPU
            found = True
        elif (backend := backend_of(runner.group(1))) is not None:
            note_gpu_backend(ev, backend, "found")
            found = True
    ngl = _NGL.search(cmd)
    if ngl is not None:
        layers = int(ngl.group(1))
        total = (
            ev.layers_total if ev.layers_total is not None and layers <= ev.layers_total else None
        )
        found = note_layers(ev, layers, total) or found
    return found


def _read_load_request(ev: EvidenceState, count: str, placed: str) -> bool:
    """0.12+: `load request="{Operation:fit ... GPULayers:15[ID:GPU-... Layers:15(9..23)]}"`."""
    layers = int(count) if count else sum(int(n) for n in _LAYERS_ON.findall(placed))
    for ident in _ID_ON.findall(placed):
        add_device(ev.devices, ident)
    note_layers(ev, layers, None)
    return True


def _read_placement(ev: EvidenceState, text: str, low: str) -> bool:
    """The scheduler's fit, where the new engine put its weights, and discovery's lines."""
    if _WILL_FIT.search(text):
        kv = _logfmt(text)
        if kv.get("library") == "cpu":
            note_on_cpu(ev)
            return True
        device = _device_name({"gpu": kv.get("gpu", "")}, ev.gpu_backend)
        if device is None:
            return False
        add_device(ev.devices, device)
        note_gpu_backend(ev, ev.gpu_backend, "use")
        return True
    match = _MODEL_WEIGHTS.search(text)
    if match is not None:
        size = to_bytes(match.group(2))
        if size is None:
            return False
        note_weights(ev, match.group(1), size)
        return True
    match = _COMPUTE_GRAPH.search(text)
    if match is not None and not is_host_buffer(match.group(1)):
        note_gpu_backend(ev, backend_of(match.group(1)), "found")
        return True
    if "gpu memory" in low or "vram overhead" in low:
        kv = _logfmt(text)
        backend = backend_of(kv.get("library", ""))
        ident = kv.get("id", "")
        if not ident.startswith("GPU-"):
            return False
        add_device(ev.found_devices, ident)
        note_gpu_backend(ev, backend, "found")
        return True
    if _CUDART.search(text):
        note_gpu_backend(ev, "CUDA", "found")
        return True
    match = _SYSTEM.search(text)
    if match is not None:
        note_gpu_backend(ev, backend_of(match.group(1)), "hint")
        return True
    return False


_OLLAMA_LINE = re.compile(r"\bsource=[\w./-]{1,64}\.go:\d|\bollama\[\d{1,10}\]:")


def is_ollama_format(line: str) -> bool:
    """Ollama's own logfmt line (`source=server.go:368`), or any line journald took from the
    ollama unit, which includes its runners' llama.cpp lines."""
    return _OLLAMA_LINE.search(line) is not None


class _Log:
    """Ollama's logfmt lines, and its runners' llama.cpp lines in its log."""

    banner = re.compile(r'msg="?(?:Listening on\b|starting llama-server")')
    """The server's; before 0.30 its runners come and go within one server's life, since
    each model's llama-server starts its own."""
    before = re.compile(
        r'^msg="?(?:starting llama-server"|system memory|gpu memory|loading model via llama-server'
        r"|waiting for llama-server)"
    )
    """Since 0.30, its lines from the start of a model's llama-server to that one's own banner
    (llama.cpp's `llama_server: initializing`), which would otherwise end the life they
    begin."""
    words = (("listening", "starting llama-server"), ("llama-server", "memory"))
    keywords = (
        "runner", "falling back", "offload", "gpu", "librar", "layer", "weights", "llama-server",
    )  # fmt: skip
    prefixes = (
        r"time=\S{1,64}(?=\s)",  # its logfmt time (or the poster's "time=...")
        r"(?:(?:le)?vel=\w{1,8}\s+)?source=[\w./-]{1,64}\.go:\d{1,6}(?=\s)",  # level, source
    )

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        """Its own lines, else its runners' llama.cpp lines (an Ollama line that is no Ollama
        finding is read as llama.cpp's)."""
        ollama_format = is_ollama_format(line)
        if not (ollama_format or "msg=" in text):
            return None
        if read_ollama_line(ev, text, low):
            return "ollama", True
        return ("ollama" if ollama_format else "llama.cpp"), read_llama_cpp_line(ev, text, low)

    def replaces(self, line: str, previous: str) -> bool:
        return False

    def listed_device(self, line: str) -> tuple[str, str] | None:
        return None


LOG = _Log()
