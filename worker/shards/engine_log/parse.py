"""Where an engine says it computes, read line by line from its own startup output.

What each engine prints, and why the reading is built the way it is:

- llama.cpp says where its layers went (`offloaded N/M layers to GPU`, `using device CUDA0`,
  the model buffer sizes) only at `-lv 4` since about b9181 (PR #23021 moved libllama's info
  lines to trace level); its default `-lv 3` prints `verbosity = 3` and none of them, so a log
  without those lines is "unknown", never "CPU". Earlier builds print them by default, in
  every era's wording: `[cublas] offloading N layers` (2023), `llm_load_tensors:` (to about
  b4400, and ik_llama.cpp, koboldcpp, llamafile, Jan's cortex since), `load_tensors:` after.
- A CUDA build whose CUDA init failed still prints `offloaded 13/33 layers to GPU` (cortex,
  2024) and then `warning: not compiled with GPU offload support` (b4199): the failure line
  is kept as it was first said and outranks any layer count after it.
- `offloaded 95/95 layers` can still leave the experts on the CPU through `-ot` tensor
  overrides (b5192): the model buffer sizes are summed per side, and CUDA_Host / CPU_Mapped /
  CPU_REPACK buffers count as host memory.
- Ollama's server log mixes its own logfmt lines (discovery: `inference compute ...
  library=cuda|rocm|cpu`; the scheduler: `offload to cuda`, `msg=offload library=cpu
  layers.offload=0`; runner command lines; 0.12's `load request ... GPULayers:15[...]`) with
  the llama.cpp or ggml lines of its runners. Discovery tries several libraries (cuda_v12,
  cuda_v13, rocm) and skips GPUs it cannot use, so a discovery failure ("Unable to load cudart
  library", "no compatible GPUs were discovered") is withdrawn when a later line finds a GPU.
- vLLM names its platform (`Automatically detected platform cuda.`) and checks every platform
  in turn: "ROCm platform is not available" on an NVIDIA node is routine and counts only while
  no GPU platform has been found. On ROCm torch calls its devices "cuda" too, so
  `device_config=cuda` never overrides a platform line.

A line that says nothing leaves the evidence unchanged; a later load replaces an earlier
one's layers and weights. Lines are matched after a cheap keyword test, with precompiled
patterns, because this runs on every new line of every followed log.
"""

from __future__ import annotations

import copy
import re
from typing import Literal

from ...gpu.values import to_bytes
from .evidence import EngineBackend, EngineEvidence

MAX_LINES = 20
"""Finding lines kept in the evidence, newest last."""
MAX_LINE_CHARS = 300
"""A finding line longer than this is cut (Ollama's offload lines run to 600 characters)."""
_SCAN_CHARS = 16_384
"""Only this much of a line is searched: vLLM's config line is about 3 KB."""

_Strength = Literal["hint", "found", "use"]
"""How strongly a line says the engine has a GPU backend: `hint` (a backend library loaded or
was compiled in), `found` (it found a GPU device), `use` (it put layers, weights or a model on
a device)."""

_KEYWORDS = (
    "offload", "device", "cuda", "rocm", "vulkan", "sycl", "metal", "mtl", "gpu", "buffer",
    "platform", "librar", "compiled", "backend", "verbosity", "weights",
    "model loading", "layer", "blocks", "runner", "overrid", "cublas", "falling back",
)  # fmt: skip

# --- cleaning: prefixes that posters, journald, docker and log formats put before a line ---

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(
    r"\s*(?:"
    r">\s?"  # quoted in an issue or a mail
    r"|\*\*"  # markdown bold around a pasted line
    r"|│\s*"  # a pager's box border (k9s)
    r"|\[[A-Z]+\]::\w+:"  # Jan's cortex: "[CORTEX]::Error:"
    # journald: "Apr 18 19:28:59 host ollama[1170]:" (the host may be missing or hold spaces)
    r"|[A-Za-z]{3}\s+\d{1,2}\s+\d\d:\d\d:\d\d\s+(?:[^\[\]\s][^\[\]]{0,63}?\s+)?"
    r"[\w.@/-]{1,64}\[\d{1,10}\]:"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?(?=\s)"
    r"|\d\d:\d\d:\d\d(?:\.\d{1,9})?(?=\s)"  # a time of day alone
    r"|\[\d{1,10}\](?=\s)"  # llama.cpp's "[pid]"
    r"|\d{1,4}\.\d\d\.\d{3}\.\d{3}(?:\s+[EWIDT](?=\s))?"  # llama.cpp "0.00.305.659 I" (2025+)
    r"|[EWIDT](?=\s+[\w.]+:)"  # llama.cpp's level letter without a timestamp (b9181+)
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?"  # vLLM
    r"|\((?:VllmWorkerProcess|Worker\w*|EngineCore\w*|APIServer)\s+pid=\d{1,10}\)"  # vLLM
    r"|[\w.-]{1,64}-\d{1,4}\s+\|(?=\s)"  # docker compose: "llama-1  | "
    r"|time=\S{1,64}(?=\s)"  # Ollama's logfmt time (or the poster's "time=...")
    r"|(?:(?:le)?vel=\w{1,8}\s+)?source=[\w./-]{1,64}\.go:\d{1,6}(?=\s)"  # Ollama's level, source
    r"|\[?[\w/.-]{1,64}\.py:\d{1,6}\]"  # vLLM's source line
    r")"
)
_OLLAMA_LINE = re.compile(r"\bsource=[\w./-]{1,64}\.go:\d|\bollama\[\d{1,10}\]:")
_VLLM_LINE = re.compile(r"\w\.py:\d{1,6}\]")


def _clean(line: str) -> str:
    """The line without colour codes, timestamps and the prefixes put before it."""
    text = _ANSI.sub("", line) if "\x1b" in line else line
    for _ in range(8):
        match = _PREFIX.match(text)
        if match is None or match.end() == 0:
            break
        text = text[match.end() :]
    text = text.strip()
    return text[:-2].rstrip() if text.endswith("**") else text


# --- what the lines say ---

_NUM = r"\d{1,7}(?:\.\d{1,6})?"
_DEVICE = re.compile(r"(CUDA|ROCm|Vulkan|SYCL|MTL|Metal|MUSA|CANN)(\d{0,3})")
_BACKEND_PREFIXES: tuple[tuple[str, EngineBackend], ...] = (
    ("cuda", "CUDA"), ("cublas", "CUDA"), ("rocm", "ROCm"), ("hip", "ROCm"),
    ("vulkan", "Vulkan"), ("metal", "Metal"), ("mtl", "Metal"), ("sycl", "SYCL"),
    ("oneapi", "SYCL"),
)  # fmt: skip

# llama.cpp and ggml
_VERBOSITY = re.compile(r"\bverbosity = (\d{1,2})\b")
_LOAD_START = re.compile(
    r"\bload_tensors: loading model tensors|\b(?:llm_load_tensors|llama_model_load_internal): "
    r"ggml ctx size"
)
_OFFLOADED = re.compile(r"\boffloaded (\d{1,5})/(\d{1,5}) layers to GPU")
_OFFLOADING = re.compile(r"\boffloading (\d{1,5}) (?:repeating )?layers to GPU")
_OFFLOADING_ONE = re.compile(r"\boffloading (?:output layer|non-repeating layers) to GPU")
_ASSIGNED = re.compile(r"\blayer\s+(\d{1,5}) assigned to device ([^\s,]{1,64})")
_WEIGHTS = re.compile(
    rf"\b(?:llm_)?load_tensors:\s+(\S{{1,64}}) (?:model )?buffer size\s*=\s*({_NUM}) MiB"
)
_RUNTIME_BUFFER = re.compile(r"(?:^|\s)(\S{1,64})\s+(KV|compute) buffer size\s*=")
_OVERRIDE = re.compile(r"buffer type overr?idd?en to CPU")
_USING_DEVICE = re.compile(r"\busing device ((?:CUDA|ROCm|Vulkan|SYCL|MTL|Metal|MUSA)\d{0,3}) \(")
_MAIN_DEVICE = re.compile(r"(?:(ggml_cuda_set_main_device: u)|U)sing device (\d{1,3}) \(.*as main")
_FOUND_HEADER = re.compile(
    r"(?:ggml_cuda_init|ggml_init_cublas): found (\d{1,3}) (CUDA|ROCm|MUSA) devices"
)
_DEVICE_LINE = re.compile(r"^Device (\d{1,3}): (.+)")
_SYCL_DEVICE_LINE = re.compile(r"compute capability [\d.]{1,8},\s*$")
_NOT_A_GPU = re.compile(r"FPGA|Processor|\bCPU\b")
_SYCL_FOUND = re.compile(r"\bfound (\d{1,3}) SYCL devices")
_SYCL_ROW = re.compile(r"^\|\s*(\d{1,3})\|\s*\[([\w]+):(gpu|cpu|acc)\w*:\d+\]\|")
_LIST_ENTRY = re.compile(r"^(?:-\s+)?((?:CUDA|ROCm|Vulkan|SYCL|MTL|MUSA|CANN)\d{1,3})\s*:\s+(\S.*)")
_JSON_DEVICE = re.compile(r'^"name":\s*"((?:CUDA|ROCm|Vulkan|SYCL|MTL|MUSA)\d{1,3})"')
_JSON_BACKEND = re.compile(r'^"backend":\s*"(CUDA|ROCm|Vulkan|SYCL|Metal|MUSA)"')
_VULKAN_FOUND = re.compile(r"ggml_vulkan: Found (\d{1,3}) Vulkan devices")
_VULKAN_DEVICE = re.compile(r"ggml_vulkan: (\d{1,3}) = (.+)")
_REGISTERED = re.compile(r"register_(?:backend|device): registered (?:backend|device) (\w+)")
_LOADED = re.compile(r"load_backend: loaded (\w+) backend from")
_LIB_FAILED = re.compile(
    r"(?:load_backend|ggml_backend_load_best): failed to (?:load|find ggml_backend_init in) "
    r"\S*?ggml-(cuda|hip|rocm|vulkan|sycl|metal|musa|opencl|cann)\b"
)
_ACCELERATION = re.compile(r"\busing (CUDA|ROCm|OpenCL|Metal) for GPU acceleration")
_COMPILED_IN = re.compile(r"\|\s*(CUDA|ROCm|Vulkan|Metal|SYCL|MUSA) : ")
_GGML_FAILED = re.compile(
    r"(?:ggml_cuda_init|ggml_init_cublas): (?:failed to initialize (CUDA|ROCm|MUSA)"
    r"|no (CUDA|ROCm) devices found)"
    r"|no (CUDA|ROCm)-capable device is detected"
    r"|ggml_(vulkan): No devices found"
    r"|ggml_(metal)_init: error"
    r"|found 0 (SYCL) devices"
)
_CPU_ONLY_BUILD = re.compile(
    r"not compiled with GPU offload support|\bno usable GPU found"
)  # llama.cpp common, when no GPU device registered at all
_CRASHED = re.compile(
    r"not compiled with any CUDA arch|no kernel image is available|invalid device function"
    r"|hipErrorNoBinaryForGpu"
)

# Ollama
_KV = re.compile(r'([\w.]{1,64})=("[^"]{0,512}"|[^\s"]{0,512})')
_OFFLOAD_PLAN = re.compile(r'msg="?offload(?: to (\w+))?\b')
_OLLAMA_FAILED = re.compile(
    r"Unable to load (cudart) library|error initializing (cuda) driver library"
    r"|no compatible GPUs were discovered|unable to verify (rocm) library|falling back to CPU"
    r"|skipping (CUDA) device|insufficient VRAM to load any model layers"
    r'|GPU discovery watchdog timed out|compatible gpu libraries" compatible=\[\]'
)
_DYNAMIC = re.compile(r"Dynamic LLM libraries\"?\s*(?:runners=)?\"?\[([^\]]{0,200})\]")
_RUNNER_CMD = re.compile(r'msg="starting (?:llama server|runner)" cmd="([^"]{0,4096})')
_RUNNER_LIB = re.compile(r"[/\\]runners[/\\]([a-z]+)")
_NGL = re.compile(r"--n-gpu-layers (\d{1,5})\b")
_GPU_LAYERS = re.compile(r"GPULayers:(\d{0,5})\[([^\]]{0,2048})\]")
_LAYERS_ON = re.compile(r"Layers:(\d{1,5})")
_ID_ON = re.compile(r"ID:([\w-]{1,64})")
_WILL_FIT = re.compile(r"new model will fit in available VRAM")
_MODEL_WEIGHTS = re.compile(r'msg="model weights" (?:buffer|device)=(\S{1,64}) size="([^"]{1,32})"')
_COMPUTE_GRAPH = re.compile(r'msg="compute graph" backend=(\S{1,64})')
_SYSTEM = re.compile(r"\bmsg=system\b.*?\b(CUDA|ROCm|Vulkan|Metal|SYCL)\.\d")
_CUDART = re.compile(r"Nvidia GPU detected via cudart|\[cudart\] CUDART CUDA Compute Capability")

# vLLM
_VLLM_DETECTED = re.compile(r"Automatically detected platform (\w+)\.")
_VLLM_CONFIRMED = re.compile(r"Confirmed (CUDA|ROCm) platform is available")
_VLLM_UNAVAILABLE = re.compile(r"\b(CUDA|ROCm) platform is not available because")
_VLLM_NO_PLATFORM = re.compile(r"No platform detected, vLLM is running on UnspecifiedPlatform")
_VLLM_DEVICE_CONFIG = re.compile(r"\bdevice_config=(\w+)(?::(\d{1,3}))?")
_VLLM_BLOCKS = re.compile(r"# (cuda|xpu) blocks: \d")
_VLLM_LOADED = re.compile(rf"(?:Loading model weights took|Model loading took) ({_NUM}) (GB|GiB)")
_VLLM_WEIGHTS_TAKE = re.compile(rf"model weights take ({_NUM})\s?GiB")

_HARD = re.compile(
    _CPU_ONLY_BUILD.pattern + "|" + _CRASHED.pattern + "|No platform detected|Dynamic LLM"
)
"""Failures a later line cannot withdraw: the process has no GPU backend at all, or crashed."""


# --- updating the evidence ---


def _backend_of(name: str) -> EngineBackend | None:
    low = name.lower()
    for prefix, backend in _BACKEND_PREFIXES:
        if low.startswith(prefix):
            return backend
    return None


def _add(names: list[str], name: str) -> None:
    if name not in names and len(names) < 64:
        names.append(name)


def _gpu(ev: EngineEvidence, backend: EngineBackend | None, strength: _Strength) -> None:
    """The engine has a GPU backend, as strongly as `strength` says."""
    if backend is None or backend == "CPU":
        return
    if ev.gpu_failed is not None:
        if strength == "hint" or _HARD.search(ev.gpu_failed):
            ev.gpu_backend = ev.gpu_backend or backend
            return
        ev.gpu_failed = None  # discovery tried another library, or another GPU, and found one
        ev.gpu_backend = backend
        ev.backend = "CPU" if ev.layers_offloaded == 0 else backend
        return
    if strength == "use" or ev.gpu_backend is None:
        ev.gpu_backend = backend
    if strength == "use":
        if ev.layers_offloaded != 0:
            ev.backend = backend
    elif ev.backend is None:
        ev.backend = backend


def _fail(ev: EngineEvidence, text: str, backend: str | None, *, on_cpu: bool = True) -> None:
    """The engine says its GPU backend failed; the first such line is kept, as said."""
    named = _backend_of(backend) if backend else None
    if named is not None and ev.gpu_backend is None:
        ev.gpu_backend = named
    if ev.gpu_failed is None:
        ev.gpu_failed = _cut(text)
    if on_cpu:
        ev.backend = "CPU"


def _on_cpu(ev: EngineEvidence) -> None:
    """The engine says it computes on the CPU (a CPU runner, CPU platform, 0 layers)."""
    ev.backend = "CPU"


def _set_layers(ev: EngineEvidence, offloaded: int, total: int | None) -> bool:
    if total is not None and offloaded > total:
        return False
    ev.layers_offloaded, ev.layers_total = offloaded, total
    if offloaded == 0:
        ev.backend = "CPU"
    elif ev.gpu_failed is None and ev.backend in (None, "CPU"):
        ev.backend = ev.gpu_backend
    return True


def _new_load(ev: EngineEvidence) -> None:
    ev.layers_offloaded = ev.layers_total = None
    ev.cpu_weight_bytes = ev.gpu_weight_bytes = None


def _is_host(name: str) -> bool:
    return name == "CPU" or name.startswith("CPU_") or "Host" in name


def _add_weights(ev: EngineEvidence, name: str, size: int) -> None:
    cpu, gpu = ev.cpu_weight_bytes or 0, ev.gpu_weight_bytes or 0
    if _is_host(name):
        ev.cpu_weight_bytes, ev.gpu_weight_bytes = cpu + size, gpu
        if ev.backend is None and gpu == 0 and not ev.layers_offloaded:
            ev.backend = "CPU"  # only host buffers so far, and nothing said of a GPU
        return
    ev.cpu_weight_bytes, ev.gpu_weight_bytes = cpu, gpu + size
    device = _DEVICE.fullmatch(name.removesuffix("_Mapped"))
    if device is not None:
        _add(ev.devices, device.group(0))
    if size > 0:
        _gpu(ev, _backend_of(name), "use")


def _found_device(ev: EngineEvidence, name: str) -> None:
    _add(ev.found_devices, name)
    _gpu(ev, _backend_of(name), "found")


# --- llama.cpp, its forks and ggml ---


def _llama_cpp(ev: EngineEvidence, text: str, low: str) -> bool:
    if "verbosity" in low:
        match = _VERBOSITY.search(text)
        if match is not None:
            ev.verbosity = int(match.group(1))
            return True
    found = _llama_load(ev, text, low)
    if found is None:
        found = _llama_devices(ev, text)
    if found is None:
        found = _llama_backends(ev, text, low)
    return found


def _llama_load(ev: EngineEvidence, text: str, low: str) -> bool | None:
    """Layers and weights of one load; None when the line is about neither."""
    if _LOAD_START.search(text):
        _new_load(ev)
        return False
    if "offload" in low:
        match = _OFFLOADED.search(text)
        if match is not None:
            ev.cpu_weight_bytes = ev.gpu_weight_bytes = None
            return _set_layers(ev, int(match.group(1)), int(match.group(2)))
        match = _OFFLOADING.search(text)
        if match is not None:
            ev.cpu_weight_bytes = ev.gpu_weight_bytes = None
            if "[cublas]" in text:
                _gpu(ev, "CUDA", "hint")
            return _set_layers(ev, int(match.group(1)), None)
        if _OFFLOADING_ONE.search(text):
            if ev.layers_total is None and ev.layers_offloaded is not None:
                ev.layers_offloaded += 1
                return True
            return False
    match = _WEIGHTS.search(text)
    if match is not None:
        size = to_bytes(match.group(2), "MiB")
        if size is None:
            return False
        _add_weights(ev, match.group(1), size)
        return True
    match = _ASSIGNED.search(text)
    if match is not None:
        _assigned(ev, int(match.group(1)), match.group(2))
        return True
    return None


def _assigned(ev: EngineEvidence, index: int, device: str) -> None:
    """`layer N assigned to device D` (llama.cpp -v, 2025+): a tally that starts at layer 0."""
    on_gpu = not (device == "CPU" or device.startswith("CPU_"))
    if index == 0:
        ev.layers_offloaded, ev.layers_total = int(on_gpu), 1
        ev.cpu_weight_bytes = ev.gpu_weight_bytes = None
    elif ev.layers_total == index and ev.layers_offloaded is not None:
        ev.layers_total, ev.layers_offloaded = index + 1, ev.layers_offloaded + on_gpu
    if not on_gpu:
        if ev.gpu_failed is None and not ev.layers_offloaded:
            _on_cpu(ev)
        return
    name = _DEVICE.fullmatch(device)
    if name is not None:
        _add(ev.devices, name.group(0))
    _gpu(ev, _backend_of(device), "use")


def _llama_devices(ev: EngineEvidence, text: str) -> bool | None:
    """Devices found at init, listed, or used; None when the line names none."""
    match = _USING_DEVICE.search(text)
    if match is not None:
        _add(ev.devices, match.group(1))
        _gpu(ev, _backend_of(match.group(1)), "use")
        return True
    match = _FOUND_HEADER.search(text)
    if match is not None:
        backend = match.group(2)
        for i in range(min(int(match.group(1)), 16)):
            _add(ev.found_devices, f"{backend}{i}")
        _gpu(ev, _backend_of(backend), "found")
        return True
    match = _DEVICE_LINE.match(text)
    if match is not None:
        return _device_line(ev, int(match.group(1)), match.group(2))
    match = _MAIN_DEVICE.search(text)
    if match is not None:
        cuda_family = ev.gpu_backend if ev.gpu_backend in ("CUDA", "ROCm") else "CUDA"
        backend = cuda_family if match.group(1) else "SYCL"
        name = f"{backend}{match.group(2)}"
        _add(ev.devices, name)
        _gpu(ev, _backend_of(backend), "use")
        return True
    match = _LIST_ENTRY.match(text) or _JSON_DEVICE.match(text)
    if match is not None:
        if "llvmpipe" in text:
            return False  # Mesa's software rasterizer: a "GPU" that is the CPU
        _found_device(ev, match.group(1))
        return True
    match = _SYCL_ROW.match(text)
    if match is not None:
        if match.group(3) != "gpu":
            return False  # SYCL lists the CPU and FPGA emulators as devices too
        _found_device(ev, f"SYCL{match.group(1)}")
        return True
    match = _VULKAN_DEVICE.search(text)
    if match is not None:
        if "llvmpipe" in match.group(2):
            return False
        _found_device(ev, f"Vulkan{match.group(1)}")
        return True
    match = _REGISTERED.search(text)
    if match is not None:
        name = match.group(1)
        if _backend_of(name) is None:
            return False
        if name[-1].isdigit() and _DEVICE.fullmatch(name):
            _add(ev.found_devices, name)
        _gpu(ev, _backend_of(name), "found")
        return True
    return None


def _device_line(ev: EngineEvidence, index: int, rest: str) -> bool:
    """`Device N: NAME, compute capability X` under ggml_cuda_init's header (CUDA, ROCm), or
    SYCL's older list, whose lines end in a comma; a headerless ROCm line names its gfx."""
    if _SYCL_DEVICE_LINE.search(rest):
        if _NOT_A_GPU.search(rest):
            return False
        _found_device(ev, f"SYCL{index}")
        return True
    if any(f"{b}{index}" in ev.found_devices for b in ("CUDA", "ROCm", "MUSA")):
        return False  # already counted from the header
    if ", gfx" in rest:
        _found_device(ev, f"ROCm{index}")
        return True
    if "compute capability" in rest:
        _found_device(ev, f"CUDA{index}")
        return True
    return False


def _llama_backends(ev: EngineEvidence, text: str, low: str) -> bool:
    """Backends loaded, compiled in or failed, and the buffers that say which one runs."""
    if ("not compiled" in low or "no usable gpu" in low) and _CPU_ONLY_BUILD.search(text):
        _fail(ev, text, None)
        return True
    match = _CRASHED.search(text)
    if match is not None:
        _fail(ev, text, None, on_cpu=False)
        return True
    match = _GGML_FAILED.search(text)
    if match is not None:
        _fail(ev, text, next((g for g in match.groups() if g), None))
        return True
    match = _LIB_FAILED.search(text)
    if match is not None:
        _fail(ev, text, match.group(1))
        return True
    match = _LOADED.search(text)
    if match is not None:
        backend = _backend_of(match.group(1))
        if backend is None:
            return False
        _gpu(ev, backend, "hint")
        return True
    match = _VULKAN_FOUND.search(text) or _SYCL_FOUND.search(text)
    if match is not None:
        _gpu(ev, "Vulkan" if "vulkan" in low else "SYCL", "found")
        return True
    if "ggml_vulkan: Using " in text:
        _gpu(ev, "Vulkan", "found")  # the earliest Vulkan builds (early 2024) named one device
        return True
    if "ggml_metal_init: found device" in text:
        _gpu(ev, "Metal", "found")
        return True
    match = _ACCELERATION.search(text) or _JSON_BACKEND.match(text)
    if match is not None:
        _gpu(ev, _backend_of(match.group(1)), "found")
        return True
    match = _COMPILED_IN.search(text) if "system_info" in text else None
    if match is not None:
        _gpu(ev, _backend_of(match.group(1)), "hint")
        return True
    match = _RUNTIME_BUFFER.search(text)
    if match is not None:
        return _runtime_buffer(ev, match.group(1), match.group(2))
    if _OVERRIDE.search(text):
        ev.cpu_override_tensors = (ev.cpu_override_tensors or 0) + 1
        return True
    return False


def _runtime_buffer(ev: EngineEvidence, name: str, kind: str) -> bool:
    """KV and compute buffers: a GPU one means the backend runs; host ones alone, with no
    GPU said anywhere before them, mean everything runs on the CPU (graph splits = 1)."""
    if _is_host(name):
        if ev.backend is None and ev.gpu_backend is None and ev.gpu_failed is None:
            _on_cpu(ev)
            return True
        return False
    device = _DEVICE.fullmatch(name)
    if device is not None and kind == "KV":
        _add(ev.devices, device.group(0))
    _gpu(ev, _backend_of(name), "found")  # a compute buffer alone is not computing there
    return True


# --- Ollama ---


def _kv(text: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _KV.findall(text)}


def _ollama_device(kv: dict[str, str], backend: EngineBackend | None) -> str | None:
    name, ident = kv.get("name", ""), kv.get("id", "") or kv.get("gpu", "")
    if _DEVICE.fullmatch(name) and name[-1].isdigit():
        return name  # 0.12+: name=CUDA0
    if ident.startswith("GPU-"):
        return ident
    if ident.isdigit() and backend is not None and backend != "CPU":
        return f"{backend}{ident}"
    return None


def _ollama(ev: EngineEvidence, text: str, low: str) -> bool:
    match = _OLLAMA_FAILED.search(text)
    if match is not None:
        _fail(ev, text, next((g for g in match.groups() if g), None))
        return True
    if "inference compute" in text:
        return _inference_compute(ev, _kv(text))
    if "offload" in low and "layers.offload=" in text:
        match = _OFFLOAD_PLAN.search(text)
        kv = _kv(text)
        library = (match.group(1) if match else None) or kv.get("library", "")
        offload, model = kv.get("layers.offload", ""), kv.get("layers.model", "")
        if not (offload.isdigit() and model.isdigit()):
            return False
        if not _set_layers(ev, int(offload), int(model)):
            return False
        if int(offload) > 0:
            _gpu(ev, _backend_of(library), "use")
        return True
    match = _DYNAMIC.search(text)
    if match is not None:
        runners = match.group(1).replace('"', "").split()
        if runners and all(r.startswith("cpu") for r in runners):
            _fail(ev, text, None)  # a build with no GPU runner at all
            return True
        return False
    match = _RUNNER_CMD.search(text)
    if match is not None:
        return _runner_cmd(ev, match.group(1))
    match = _GPU_LAYERS.search(text)
    if match is not None:
        return _load_request(ev, match.group(1), match.group(2))
    return _ollama_placement(ev, text, low)


def _inference_compute(ev: EngineEvidence, kv: dict[str, str]) -> bool:
    """Ollama's discovery result, one line per device (or one `library=cpu` line)."""
    library = kv.get("library", "").lower()
    if not library:
        library = next((b for b, _ in _BACKEND_PREFIXES if b in kv.get("libdirs", "")), "")
    if library == "cpu":
        if ev.gpu_backend is None and ev.backend is None:
            _on_cpu(ev)
            return True
        return False
    backend = _backend_of(library)
    if backend is None:
        return False
    device = _ollama_device(kv, backend)
    if device is not None:
        _add(ev.found_devices, device)
    _gpu(ev, backend, "found")
    return True


def _runner_cmd(ev: EngineEvidence, cmd: str) -> bool:
    found = False
    runner = _RUNNER_LIB.search(cmd)
    if runner is not None:
        if runner.group(1) == "cpu":
            _on_cpu(ev)  # runners/cpu*/ollama_llama_server can only compute on the CPU
            found = True
        elif (backend := _backend_of(runner.group(1))) is not None:
            _gpu(ev, backend, "found")
            found = True
    ngl = _NGL.search(cmd)
    if ngl is not None:
        layers = int(ngl.group(1))
        total = (
            ev.layers_total if ev.layers_total is not None and layers <= ev.layers_total else None
        )
        found = _set_layers(ev, layers, total) or found
    return found


def _load_request(ev: EngineEvidence, count: str, placed: str) -> bool:
    """0.12+: `load request="{Operation:fit ... GPULayers:15[ID:GPU-... Layers:15(9..23)]}"`."""
    layers = int(count) if count else sum(int(n) for n in _LAYERS_ON.findall(placed))
    for ident in _ID_ON.findall(placed):
        _add(ev.devices, ident)
    _set_layers(ev, layers, None)
    return True


def _ollama_placement(ev: EngineEvidence, text: str, low: str) -> bool:
    """The scheduler's fit, where the new engine put its weights, and discovery's lines."""
    if _WILL_FIT.search(text):
        kv = _kv(text)
        if kv.get("library") == "cpu":
            _on_cpu(ev)
            return True
        device = _ollama_device({"gpu": kv.get("gpu", "")}, ev.gpu_backend)
        if device is None:
            return False
        _add(ev.devices, device)
        _gpu(ev, ev.gpu_backend, "use")
        return True
    match = _MODEL_WEIGHTS.search(text)
    if match is not None:
        size = to_bytes(match.group(2))
        if size is None:
            return False
        _add_weights(ev, match.group(1), size)
        return True
    match = _COMPUTE_GRAPH.search(text)
    if match is not None and not _is_host(match.group(1)):
        _gpu(ev, _backend_of(match.group(1)), "found")
        return True
    if "gpu memory" in low or "vram overhead" in low:
        kv = _kv(text)
        backend = _backend_of(kv.get("library", ""))
        ident = kv.get("id", "")
        if not ident.startswith("GPU-"):
            return False
        _add(ev.found_devices, ident)
        _gpu(ev, backend, "found")
        return True
    if _CUDART.search(text):
        _gpu(ev, "CUDA", "found")
        return True
    match = _SYSTEM.search(text)
    if match is not None:
        _gpu(ev, _backend_of(match.group(1)), "hint")
        return True
    return False


# --- vLLM ---


def _vllm(ev: EngineEvidence, text: str) -> bool:
    match = _VLLM_DETECTED.search(text)
    if match is not None:
        platform = match.group(1).lower()
        if platform == "cpu":
            _on_cpu(ev)
            return True
        _gpu(ev, _backend_of(platform), "use")
        return True
    match = _VLLM_CONFIRMED.search(text)
    if match is not None:
        _gpu(ev, _backend_of(match.group(1)), "found")
        return True
    match = _VLLM_UNAVAILABLE.search(text)
    if match is not None:
        if ev.gpu_backend is not None and ev.gpu_failed is None:
            return False  # vLLM checks every platform; one was found already
        _fail(ev, text, match.group(1))
        return True
    if _VLLM_NO_PLATFORM.search(text):
        _fail(ev, text, None, on_cpu=False)
        return True
    match = _VLLM_DEVICE_CONFIG.search(text)
    if match is not None:
        device = match.group(1).lower()
        if device == "cpu":
            _on_cpu(ev)
            return True
        if match.group(2) is not None:
            _add(ev.devices, f"{device}:{match.group(2)}")
        _gpu(ev, _backend_of(device), "found")
        return True
    match = _VLLM_BLOCKS.search(text)
    if match is not None:
        _gpu(ev, _backend_of(match.group(1)), "found")
        return True
    match = _VLLM_LOADED.search(text)
    if match is not None and "cpu_model_runner" not in text:
        size = to_bytes(f"{match.group(1)} {match.group(2)}")
        if size is None:
            return False
        ev.gpu_weight_bytes = (ev.gpu_weight_bytes or 0) + size  # one line per worker (TP)
        return True
    match = _VLLM_WEIGHTS_TAKE.search(text)
    if match is not None and ev.gpu_weight_bytes is None:
        ev.gpu_weight_bytes = to_bytes(f"{match.group(1)} GiB")
        return True
    return False


# --- reading ---


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def _remember(ev: EngineEvidence, text: str) -> None:
    line = _cut(text)
    if ev.lines and _ASSIGNED.search(line):
        last = _ASSIGNED.search(ev.lines[-1])
        now = _ASSIGNED.search(line)
        if last is not None and now is not None and last.group(2) == now.group(2):
            ev.lines[-1] = line  # a run of per-layer lines keeps only its latest
            return
    ev.lines.append(line)
    del ev.lines[:-MAX_LINES]


def read_line(evidence: EngineEvidence, line: str) -> None:
    """Update `evidence` from one line of an engine's output. Never raises."""
    if len(line) > _SCAN_CHARS:
        line = line[:_SCAN_CHARS]
    low = line.lower()
    if not any(k in low for k in _KEYWORDS):
        return
    text = _clean(line)
    if not text:
        return
    ollama_format = _OLLAMA_LINE.search(line) is not None
    engine = "ollama" if ollama_format else "llama.cpp"
    if ollama_format or "msg=" in text:
        found = _ollama(evidence, text, low)
        if found:
            engine = "ollama"
        else:
            found = _llama_cpp(evidence, text, low)
    elif _VLLM_LINE.search(line):
        found, engine = _vllm(evidence, text), "vllm"
    else:
        found = _llama_cpp(evidence, text, low)
    if not found:
        return
    if engine == "ollama" or evidence.engine is None:
        evidence.engine = engine
    _remember(evidence, text)


def read_text(text: str) -> EngineEvidence:
    """A fresh evidence from a whole log."""
    evidence = EngineEvidence()
    for line in text.splitlines():
        read_line(evidence, line)
    return evidence


class EvidenceReader:
    """The evidence of one engine's output, read line by line; `snapshot()` is what it says
    so far, a value no later line changes."""

    def __init__(self) -> None:
        self._evidence = EngineEvidence()
        self._snapshot: EngineEvidence | None = None

    def read(self, line: str) -> None:
        read_line(self._evidence, line)
        self._snapshot = None

    def snapshot(self) -> EngineEvidence:
        if self._snapshot is None:
            self._snapshot = copy.deepcopy(self._evidence)
        return self._snapshot
