"""llama.cpp, its forks and ggml: where the layers went, which GPUs were found and used,
and which backends loaded or failed.

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
- Every load starts with `load_tensors: loading model tensors` and replaces the one before it.
  b11434 loads twice by default: `--fit` measures the model with a dry run first (printed from
  `-lv 5`), and a CPU-only build prints no `offloaded` line that would start the count afresh.
- b11434 prints common/'s and the server's lines behind a module tag (`I cmn  common_param:`,
  clean.py takes it off), its verbosity as a number of any width (`-v` is 2147483647), and the
  `device_info` list of devices from `-lv 4`: every device ggml registered, the CPU last
  (ggml-backend-reg.cpp registers it after every GPU backend), so a list that reaches the CPU
  having named no GPU says the build has none to use, with or without `-ngl`.

Ollama's runners are llama.cpp builds, so their lines in Ollama's log are read here too.
"""

from __future__ import annotations

import re

from ...gpu.values import to_bytes
from ..evidence.rules import (
    CPU_ONLY_BUILD,
    CRASHED,
    DEVICE,
    NUMBER,
    add_device,
    backend_of,
    is_host_buffer,
    note_found_device,
    note_gpu_backend,
    note_gpu_failure,
    note_layers,
    note_new_load,
    note_on_cpu,
    note_weights,
)
from ..evidence.state import EvidenceState

MODULE_TAG = r"(?:cmn|srv|slot|spec|que|res)\s+[\w~()]{1,12}:(?=\s|$)"
"""llama.cpp's module tag and the function that logged, as common/ and the server print them
(b11434: `cmn  common_param:`, `srv    load_model:`, `slot   load_model:`): the tag, then
`__func__` cut and right-aligned to 12 characters (`%12.*s`), so a line of common/'s
`device_info` list reads `cmn  common_param:   - CUDA0   : ...` and nothing anchored at the
start of the message sees it until the tag is off. libllama's and ggml's lines carry none."""
PREFIXES = (
    r"\[[A-Z]+\]::\w+:",  # Jan's cortex: "[CORTEX]::Error:"
    r"\[\d{1,10}\](?=\s)",  # llama.cpp's "[pid]"
    r"\d{1,4}\.\d\d\.\d{3}\.\d{3}(?:\s+[EWIDT](?=\s))?",  # "0.00.305.659 I" (2025 on)
    rf"[EWIDT](?=\s+(?:[\w.]+:|{MODULE_TAG}))",  # its level letter alone (b9181 on)
    MODULE_TAG,  # its module tag and function (common/, the server)
)
"""What llama.cpp puts before a line, taken off by clean.py."""

_VERBOSITY = re.compile(r"\bverbosity = (-?\d{1,20})\b")
_LOAD_START = re.compile(
    r"\bload_tensors: loading model tensors|\b(?:llm_load_tensors|llama_model_load_internal): "
    r"ggml ctx size"
)
_OFFLOADED = re.compile(r"\boffloaded (\d{1,5})/(\d{1,5}) layers to GPU")
_OFFLOADING = re.compile(r"\boffloading (\d{1,5}) (?:repeating )?layers to GPU")
_OFFLOADING_ONE = re.compile(r"\boffloading (?:output layer|non-repeating layers) to GPU")
_ASSIGNED = re.compile(r"\blayer\s+(\d{1,5}) assigned to device ([^\s,]{1,64})")
_WEIGHTS = re.compile(
    rf"\b(?:llm_)?load_tensors:\s+(\S{{1,64}}) (?:model )?buffer size\s*=\s*({NUMBER}) MiB"
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
_FREE_MEMORY = re.compile(r"\s+\(\d+ MiB, \d+ MiB free\)$")
_CPU_ENTRY = re.compile(r"^-\s+CPU\s*:\s+\S")
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


def assigned_device(line: str) -> str | None:
    """The device a `layer N assigned to device D` line names; None for any other line."""
    match = _ASSIGNED.search(line)
    return match.group(2) if match is not None else None


def read_llama_cpp_line(ev: EvidenceState, text: str, low: str) -> bool:
    """Update `ev` from one cleaned line (`low` is the raw line lowercased); True when the
    line is a finding, to be kept among the evidence's lines."""
    if "verbosity" in low:
        match = _VERBOSITY.search(text)
        if match is not None:
            ev.verbosity = int(match.group(1))
            return True
    found = _read_load(ev, text, low)
    if found is None:
        found = _read_devices(ev, text)
    if found is None:
        found = _read_backends(ev, text, low)
    return found


def _read_load(ev: EvidenceState, text: str, low: str) -> bool | None:
    """Layers and weights of one load; None when the line is about neither."""
    if _LOAD_START.search(text):
        note_new_load(ev)
        return False
    if "offload" in low:
        match = _OFFLOADED.search(text)
        if match is not None:
            ev.cpu_weight_bytes = ev.gpu_weight_bytes = None
            return note_layers(ev, int(match.group(1)), int(match.group(2)))
        match = _OFFLOADING.search(text)
        if match is not None:
            ev.cpu_weight_bytes = ev.gpu_weight_bytes = None
            if "[cublas]" in text:
                note_gpu_backend(ev, "CUDA", "hint")
            return note_layers(ev, int(match.group(1)), None)
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
        note_weights(ev, match.group(1), size)
        return True
    match = _ASSIGNED.search(text)
    if match is not None:
        _read_layer_assigned(ev, int(match.group(1)), match.group(2))
        return True
    return None


def _read_layer_assigned(ev: EvidenceState, index: int, device: str) -> None:
    """`layer N assigned to device D` (llama.cpp -v, 2025+): a tally that starts at layer 0."""
    on_gpu = not (device == "CPU" or device.startswith("CPU_"))
    if index == 0:
        ev.layers_offloaded, ev.layers_total = int(on_gpu), 1
        ev.cpu_weight_bytes = ev.gpu_weight_bytes = None
    elif ev.layers_total == index and ev.layers_offloaded is not None:
        ev.layers_total, ev.layers_offloaded = index + 1, ev.layers_offloaded + on_gpu
    if not on_gpu:
        if ev.gpu_failed is None and not ev.layers_offloaded:
            note_on_cpu(ev)
        return
    name = DEVICE.fullmatch(device)
    if name is not None:
        add_device(ev.devices, name.group(0))
    note_gpu_backend(ev, backend_of(device), "use")


def _read_devices(ev: EvidenceState, text: str) -> bool | None:
    """Devices found at init, listed, or used; None when the line names none."""
    found = _read_init_devices(ev, text)
    return found if found is not None else _read_listed_devices(ev, text)


def _read_init_devices(ev: EvidenceState, text: str) -> bool | None:
    """The device used, and those ggml_cuda_init (or SYCL's older list) found at start."""
    match = _USING_DEVICE.search(text)
    if match is not None:
        add_device(ev.devices, match.group(1))
        note_gpu_backend(ev, backend_of(match.group(1)), "use")
        return True
    match = _FOUND_HEADER.search(text)
    if match is not None:
        backend = match.group(2)
        for i in range(min(int(match.group(1)), 16)):
            add_device(ev.found_devices, f"{backend}{i}")
        note_gpu_backend(ev, backend_of(backend), "found")
        return True
    match = _DEVICE_LINE.match(text)
    if match is not None:
        return _read_device_line(ev, int(match.group(1)), match.group(2))
    match = _MAIN_DEVICE.search(text)
    if match is not None:
        cuda_family = ev.gpu_backend if ev.gpu_backend in ("CUDA", "ROCm") else "CUDA"
        backend = cuda_family if match.group(1) else "SYCL"
        name = f"{backend}{match.group(2)}"
        add_device(ev.devices, name)
        note_gpu_backend(ev, backend_of(backend), "use")
        return True
    return None


def _read_listed_devices(ev: EvidenceState, text: str) -> bool | None:
    """Devices in a list: `--list-devices` (text or JSON), `device_info`, SYCL's table,
    ggml_vulkan's lines, and the devices a backend registered."""
    found = _read_device_info(ev, text)
    if found is not None:
        return found
    match = _LIST_ENTRY.match(text) or _JSON_DEVICE.match(text)
    if match is not None:
        if "llvmpipe" in text:
            return False  # Mesa's software rasterizer: a "GPU" that is the CPU
        note_found_device(ev, match.group(1))
        return True
    match = _SYCL_ROW.match(text)
    if match is not None:
        if match.group(3) != "gpu":
            return False  # SYCL lists the CPU and FPGA emulators as devices too
        note_found_device(ev, f"SYCL{match.group(1)}")
        return True
    match = _VULKAN_DEVICE.search(text)
    if match is not None:
        if "llvmpipe" in match.group(2):
            return False
        note_found_device(ev, f"Vulkan{match.group(1)}")
        return True
    match = _REGISTERED.search(text)
    if match is not None:
        name = match.group(1)
        if backend_of(name) is None:
            return False
        if name[-1].isdigit() and DEVICE.fullmatch(name):
            add_device(ev.found_devices, name)
        note_gpu_backend(ev, backend_of(name), "found")
        return True
    return None


def _read_device_info(ev: EvidenceState, text: str) -> bool | None:
    """b11434's `device_info:` and the CPU that ends its list: a list that named no GPU before
    it is an engine with no GPU to use. None for any other line."""
    if text == "device_info:":
        ev.listing_devices = True
        return False
    if not ev.listing_devices or _CPU_ENTRY.match(text) is None:
        return None
    ev.listing_devices = False
    if ev.found_devices or ev.gpu_backend is not None:
        return False
    ev.no_gpu_listed = True
    if ev.gpu_failed is not None:
        return False  # its `-ngl` warning said so first
    note_on_cpu(ev)
    return True


def _read_device_line(ev: EvidenceState, index: int, rest: str) -> bool:
    """`Device N: NAME, compute capability X` under ggml_cuda_init's header (CUDA, ROCm), or
    SYCL's older list, whose lines end in a comma; a headerless ROCm line names its gfx."""
    if _SYCL_DEVICE_LINE.search(rest):
        if _NOT_A_GPU.search(rest):
            return False
        note_found_device(ev, f"SYCL{index}")
        return True
    if any(f"{b}{index}" in ev.found_devices for b in ("CUDA", "ROCm", "MUSA")):
        return False  # already counted from the header
    if ", gfx" in rest:
        note_found_device(ev, f"ROCm{index}")
        return True
    if "compute capability" in rest:
        note_found_device(ev, f"CUDA{index}")
        return True
    return False


def _read_backends(ev: EvidenceState, text: str, low: str) -> bool:
    """Backends loaded, compiled in or failed, and the buffers that say which one runs."""
    if ("compiled" in low or "no usable gpu" in low) and CPU_ONLY_BUILD.search(text):
        ev.cpu_only_build = True
        note_gpu_failure(ev, text, None)
        return True
    match = CRASHED.search(text)
    if match is not None:
        note_gpu_failure(ev, text, None, on_cpu=False)
        return True
    match = _GGML_FAILED.search(text)
    if match is not None:
        note_gpu_failure(ev, text, next((g for g in match.groups() if g), None))
        return True
    match = _LIB_FAILED.search(text)
    if match is not None:
        note_gpu_failure(ev, text, match.group(1))
        return True
    match = _LOADED.search(text)
    if match is not None:
        backend = backend_of(match.group(1))
        if backend is None:
            return False
        note_gpu_backend(ev, backend, "hint")
        return True
    match = _VULKAN_FOUND.search(text) or _SYCL_FOUND.search(text)
    if match is not None:
        note_gpu_backend(ev, "Vulkan" if "vulkan" in low else "SYCL", "found")
        return True
    if "ggml_vulkan: Using " in text:
        # the earliest Vulkan builds (early 2024) named one device
        note_gpu_backend(ev, "Vulkan", "found")
        return True
    if "ggml_metal_init: found device" in text:
        note_gpu_backend(ev, "Metal", "found")
        return True
    match = _ACCELERATION.search(text) or _JSON_BACKEND.match(text)
    if match is not None:
        note_gpu_backend(ev, backend_of(match.group(1)), "found")
        return True
    match = _COMPILED_IN.search(text) if "system_info" in text else None
    if match is not None:
        note_gpu_backend(ev, backend_of(match.group(1)), "hint")
        return True
    match = _RUNTIME_BUFFER.search(text)
    if match is not None:
        return _read_runtime_buffer(ev, match.group(1), match.group(2))
    if _OVERRIDE.search(text):
        ev.cpu_override_tensors = (ev.cpu_override_tensors or 0) + 1
        return True
    return False


def _read_runtime_buffer(ev: EvidenceState, name: str, kind: str) -> bool:
    """KV and compute buffers: a GPU one means the backend runs; host ones alone, with no
    GPU said anywhere before them, mean everything runs on the CPU (graph splits = 1)."""
    if is_host_buffer(name):
        if ev.backend is None and ev.gpu_backend is None and ev.gpu_failed is None:
            note_on_cpu(ev)
            return True
        return False
    device = DEVICE.fullmatch(name)
    if device is not None and kind == "KV":
        add_device(ev.devices, device.group(0))
    # a compute buffer alone is not computing there
    note_gpu_backend(ev, backend_of(name), "found")
    return True


def listed_device(line: str) -> tuple[str, str] | None:
    """A `--list-devices` line (`CUDA0: NVIDIA A100 (81050 MiB, 80536 MiB free)`): the device
    and what it is, without its memory; None for any other line."""
    match = _LIST_ENTRY.match(line)
    if match is None:
        return None
    return match.group(1), _FREE_MEMORY.sub("", match.group(2))


class _Log:
    """llama.cpp's lines: the format every line no other engine claims is read in."""

    banner = re.compile(
        r"llama_server: initializing\b|(?:^|\s)build: \d{1,7} \(|\bmain: build = \d"
    )
    """b11434's first timestamped line, `print_build_info`'s (2023 to 2025), `main`'s (2023)."""
    before = re.compile(
        r"^(?:warn(?:ing)?: |Log start$"
        r"|ggml_(?:init_cublas|cuda|vulkan|sycl|metal|opencl|hip)\w*:"
        r"|load_backend:|register_backend:|register_device:|Device \d{1,3}:|Using device \d)"
    )
    """Its argument warnings (printed while it parses its flags) and its GPU backends' init."""
    words = (
        ("initializing", "build"),
        ("warn", "log start", "ggml_", "backend", "device"),
    )
    prefixes = PREFIXES
    keywords = (
        "offload", "device", "cuda", "rocm", "vulkan", "sycl", "metal", "mtl", "gpu", "buffer",
        "librar", "compiled", "backend", "verbosity", "layer", "overrid", "cublas",
        "model tensors", "ctx size", "mib free",
    )  # fmt: skip
    """A load's first line too (`load_tensors: loading model tensors`, `llm_load_tensors:
    ggml ctx size`), which names nothing else but starts the count of layers and weights
    afresh, and `device_info`'s CPU entry (`- CPU : AMD EPYC (24105 MiB, 24105 MiB free)`),
    which names nothing but the CPU."""

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool]:
        return "llama.cpp", read_llama_cpp_line(ev, text, low)

    def replaces(self, line: str, previous: str) -> bool:
        """`layer N assigned to device D` (`-v`, 2025 on) comes one a layer: a run of them on
        one device keeps its latest."""
        device = assigned_device(line)
        return device is not None and assigned_device(previous) == device

    def listed_device(self, line: str) -> tuple[str, str] | None:
        return listed_device(line)


LOG = _Log()
