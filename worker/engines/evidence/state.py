"""What an engine says about where it computes, read from its own output.

Engine evidence outranks memory: llama.cpp with 0 of 29 layers offloaded
still allocates a CUDA compute buffer of over 1 GiB, so a shard can hold GPU
memory and compute on the CPU. A missing line means "unknown", never "CPU":
llama.cpp prints where its layers went only at `-lv 4` since about b9181.

The evidence crosses from the log-following task to the tick, so what leaves
this package is a frozen value; the parsers work on an EvidenceState that
only its reader holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

EngineBackend = Literal["CUDA", "ROCm", "Vulkan", "Metal", "SYCL", "CPU"]
WRITES_DELETED = "was deleted while its process writes to it"
"""What is said of a log deleted under its engine, after its path."""
LOAD_LINES_VERBOSITY = 4
"""llama.cpp's trace level (`-lv 4`), from which it prints its load lines (about b9181 on)."""


@dataclass(frozen=True)
class EngineEvidence:
    """Everything read so far from one shard's engine output, as one value."""

    engine: str | None = None
    """"llama.cpp", "ollama" or "vllm", when the lines say which."""
    backend: EngineBackend | None = None
    """The compute backend the engine says it uses (its GPU backend, or CPU)."""
    devices: tuple[str, ...] = ()
    """GPU devices the engine says it uses, as it names them ("CUDA0", "ROCm1", "cuda:0")."""
    layers_offloaded: int | None = None
    layers_total: int | None = None
    gpu_failed: str | None = None
    """The engine's own line saying its GPU backend failed or found no usable GPU."""
    cpu_weight_bytes: int | None = None
    """Model weights the engine keeps in host memory: the sum of llama.cpp's "CPU" /
    "CPU_Mapped" model buffer sizes. A full offload still keeps the token embeddings there;
    `-ot` tensor overrides that put experts on the CPU make it large."""
    gpu_weight_bytes: int | None = None
    """Model weights on GPUs: the sum of the GPU model buffer sizes (CUDA0, ROCm0, ...)."""
    gpu_backend: EngineBackend | None = None
    """The GPU backend the engine found, loaded or failed to start, even when it then computes
    on the CPU: a CUDA build at `-ngl 0` reads backend "CPU" and gpu_backend "CUDA"."""
    found_devices: tuple[str, ...] = ()
    """GPU devices the engine found at start (ggml_cuda_init, ggml_vulkan, a SYCL table,
    `--list-devices`, Ollama's discovery), whether or not it then uses them."""
    verbosity: int | None = None
    """llama.cpp's log verbosity where it says it (`verbosity = 3`): at 3, the default since
    about b9181, it prints neither devices nor offloaded layers; `-lv 4` does."""
    cpu_override_tensors: int | None = None
    """Tensors an `-ot`/`--override-tensor` rule put in host memory (one line each)."""
    cpu_only_build: bool = False
    """The engine says it may have been compiled without GPU support, and no line of it names a
    GPU backend: a CPU-only llama.cpp given `-ngl` (b11434: `warning: one possible reason is
    that llama.cpp was compiled without GPU support`; older builds: `not compiled with GPU
    offload support`). A CUDA build whose CUDA init failed prints the same warning after its
    init line, which names CUDA, so it is not one."""
    no_gpu_listed: bool = False
    """llama.cpp listed its devices (`device_info:`, from `-lv 4` in b11434) and none was a
    GPU, and no line of it names a GPU backend: it has none to compute on, whatever `-ngl`
    says. Its `cpu_only_build` is set with it."""
    lines: tuple[str, ...] = ()
    """The lines each finding came from, newest last (bounded), for the status's evidence."""
    stale_since: datetime | None = None
    """When the log this was read from was truncated, rotated or removed while the same
    process writes it: what it said stands, stale, until the engine says more."""
    deleted: str | None = None
    """The log's path, where its file was deleted while its process still writes to it: what
    it said before stands, stale since then (`stale_since`), and nothing more is read."""
    behind_bytes: int | None = None
    """What the log held past what was read when this was given: it grows faster than its
    reading's budget (follow.py), and the rest is read at the next look. None: all read."""
    unread: str | None = None
    """Why the log is not read now (source.py: a named pipe in its place, a file its engine's
    user may not read; journal/: a journal this worker cannot read, and how to fix it), naming
    its path; None while it is read."""

    @property
    def known(self) -> bool:
        return (
            self.backend is not None
            or self.layers_offloaded is not None
            or self.gpu_failed is not None
            or bool(self.devices)
        )

    @property
    def load_lines_hidden(self) -> bool:
        """llama.cpp said a verbosity below 4, which hides where its layers go: since about
        b9181 its load lines (devices used, layers offloaded, weights) are trace level, printed
        from `-lv 4` up; b11434 runs at `verbosity = 3` unless told otherwise."""
        return self.verbosity is not None and self.verbosity < LOAD_LINES_VERBOSITY


@dataclass
class EvidenceState:
    """The parsers' working copy of EngineEvidence, updated line by line in place; it never
    leaves its reader, which hands out `freeze()`'s values instead."""

    engine: str | None = None
    backend: EngineBackend | None = None
    devices: list[str] = field(default_factory=list)
    layers_offloaded: int | None = None
    layers_total: int | None = None
    gpu_failed: str | None = None
    cpu_weight_bytes: int | None = None
    gpu_weight_bytes: int | None = None
    gpu_backend: EngineBackend | None = None
    found_devices: list[str] = field(default_factory=list)
    verbosity: int | None = None
    cpu_override_tensors: int | None = None
    cpu_only_build: bool = False
    """The engine said so; the value adds that no line named a GPU backend."""
    listing_devices: bool = False
    """Between llama.cpp's `device_info:` and the end of its list (the CPU, listed last)."""
    no_gpu_listed: bool = False
    lines: list[str] = field(default_factory=list)

    def freeze(self) -> EngineEvidence:
        return EngineEvidence(
            engine=self.engine,
            backend=self.backend,
            devices=tuple(self.devices),
            layers_offloaded=self.layers_offloaded,
            layers_total=self.layers_total,
            gpu_failed=self.gpu_failed,
            cpu_weight_bytes=self.cpu_weight_bytes,
            gpu_weight_bytes=self.gpu_weight_bytes,
            gpu_backend=self.gpu_backend,
            found_devices=tuple(self.found_devices),
            verbosity=self.verbosity,
            cpu_override_tensors=self.cpu_override_tensors,
            cpu_only_build=(self.cpu_only_build or self.no_gpu_listed) and self.gpu_backend is None,
            no_gpu_listed=self.no_gpu_listed and self.gpu_backend is None,
            lines=tuple(self.lines),
        )
