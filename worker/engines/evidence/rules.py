"""How one line's finding weighs against what the lines before it said.

- A line says the engine has a GPU backend with a strength (`Strength`): a library that
  loaded is a hint, a GPU found is stronger, layers or weights put on a device are the
  strongest, and only that says where it computes.
- The engine's first failure line is kept as it was said and outranks a layer count after
  it: builds whose GPU init failed still print `offloaded 13/33 layers to GPU`. A failure
  that only one GPU library or one GPU met is withdrawn when a later line finds a GPU, since
  Ollama and vLLM try several in turn; a build with no GPU backend at all, or one that
  crashed in its GPU kernels, stays failed whatever a later line finds.
- A later load replaces an earlier one's layers and weights: a log followed across a model
  swap describes the model loaded now.
- Host buffers (`CPU`, `CPU_Mapped`, `CPU_REPACK`, `CUDA_Host`) count as host memory.
"""

from __future__ import annotations

import re
from typing import Literal

from .state import EngineBackend, EvidenceState

MAX_LINE_CHARS = 300
"""A finding line longer than this is cut (Ollama's offload lines run to 600 characters)."""
_MAX_DEVICES = 64

NUMBER = r"\d{1,7}(?:\.\d{1,6})?"
"""A size as engines print it (`3872.00`, `12.55`), bounded so no line makes it run long."""
DEVICE = re.compile(r"(CUDA|ROCm|Vulkan|SYCL|MTL|Metal|MUSA|CANN)(\d{0,3})")
"""A GPU device as ggml names it (`CUDA0`, `ROCm1`, `MTL0`, `Metal`)."""
BACKEND_PREFIXES: tuple[tuple[str, EngineBackend], ...] = (
    ("cuda", "CUDA"), ("cublas", "CUDA"), ("rocm", "ROCm"), ("hip", "ROCm"),
    ("vulkan", "Vulkan"), ("metal", "Metal"), ("mtl", "Metal"), ("sycl", "SYCL"),
    ("oneapi", "SYCL"),
)  # fmt: skip
"""How the engines' names for a backend, library or device begin, and the backend each is."""

CPU_ONLY_BUILD = re.compile(
    r"not compiled with GPU offload support|\bno usable GPU found"
    r"|compiled without GPU support"
)
"""llama.cpp's `-ngl` warnings when no GPU device registered at all: `not compiled with GPU
offload support` (b4199 and before), then `no usable GPU found` followed by `one possible
reason is that llama.cpp was compiled without GPU support` (b6448 to b11434, common/arg.cpp).
A CUDA build whose CUDA init failed prints them too, after its own init line."""
CRASHED = re.compile(
    r"not compiled with any CUDA arch|no kernel image is available|invalid device function"
    r"|hipErrorNoBinaryForGpu"
)
"""The GPU kernels cannot run on this GPU: the build left out its architecture."""
_HARD = re.compile(
    CPU_ONLY_BUILD.pattern + "|" + CRASHED.pattern + "|No platform detected|Dynamic LLM"
)
"""Failures a later line cannot withdraw: the process has no GPU backend at all, or crashed."""

Strength = Literal["hint", "found", "use"]
"""How strongly a line says the engine has a GPU backend: `hint` (a backend library loaded or
was compiled in), `found` (it found a GPU device), `use` (it put layers, weights or a model on
a device)."""


def cut_line(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def backend_of(name: str) -> EngineBackend | None:
    """The GPU backend a library, device or platform name belongs to; None for any other."""
    low = name.lower()
    for prefix, backend in BACKEND_PREFIXES:
        if low.startswith(prefix):
            return backend
    return None


def add_device(names: list[str], name: str) -> None:
    """`name` once, in the order first said; a bounded list whatever the log holds."""
    if name not in names and len(names) < _MAX_DEVICES:
        names.append(name)


def is_host_buffer(name: str) -> bool:
    return name == "CPU" or name.startswith("CPU_") or "Host" in name


def note_gpu_backend(ev: EvidenceState, backend: EngineBackend | None, strength: Strength) -> None:
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


def note_gpu_failure(
    ev: EvidenceState, text: str, backend: str | None, *, on_cpu: bool = True
) -> None:
    """The engine says its GPU backend failed; the first such line is kept, as said. With
    `on_cpu` False the engine stops rather than computing on the CPU (a crash, no platform)."""
    named = backend_of(backend) if backend else None
    if named is not None and ev.gpu_backend is None:
        ev.gpu_backend = named
    if ev.gpu_failed is None:
        ev.gpu_failed = cut_line(text)
    if on_cpu:
        ev.backend = "CPU"


def note_on_cpu(ev: EvidenceState) -> None:
    """The engine says it computes on the CPU (a CPU runner, CPU platform, 0 layers)."""
    ev.backend = "CPU"


def note_layers(ev: EvidenceState, offloaded: int, total: int | None) -> bool:
    """The layers put on GPUs, of `total` when said; False, changing nothing, when that says
    more are offloaded than there are."""
    if total is not None and offloaded > total:
        return False
    ev.layers_offloaded, ev.layers_total = offloaded, total
    if offloaded == 0:
        ev.backend = "CPU"
    elif ev.gpu_failed is None and ev.backend in (None, "CPU"):
        ev.backend = ev.gpu_backend
    return True


def note_new_load(ev: EvidenceState) -> None:
    """A model load starts: the layers and weights of the one before it no longer hold."""
    ev.layers_offloaded = ev.layers_total = None
    ev.cpu_weight_bytes = ev.gpu_weight_bytes = None


def note_weights(ev: EvidenceState, name: str, size: int) -> None:
    """`size` bytes of model weights in the buffer `name`, summed per side (host or GPU)."""
    cpu, gpu = ev.cpu_weight_bytes or 0, ev.gpu_weight_bytes or 0
    if is_host_buffer(name):
        ev.cpu_weight_bytes, ev.gpu_weight_bytes = cpu + size, gpu
        if ev.backend is None and gpu == 0 and not ev.layers_offloaded:
            ev.backend = "CPU"  # only host buffers so far, and nothing said of a GPU
        return
    ev.cpu_weight_bytes, ev.gpu_weight_bytes = cpu, gpu + size
    device = DEVICE.fullmatch(name.removesuffix("_Mapped"))
    if device is not None:
        add_device(ev.devices, device.group(0))
    if size > 0:
        note_gpu_backend(ev, backend_of(name), "use")


def note_found_device(ev: EvidenceState, name: str) -> None:
    """The engine found the GPU device `name` at start, whether or not it then uses it."""
    add_device(ev.found_devices, name)
    note_gpu_backend(ev, backend_of(name), "found")
