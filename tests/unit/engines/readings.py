"""What a log says, set beside what its engine's reader made of it: the expectations the
engine tests write for every real log.

Real logs in ../shared/corpus/engine-logs (llama.cpp from 2023's cuBLAS builds to b10906 and
its forks, Ollama 0.1.32 to 0.32, vLLM 0.5 to V1; PROVENANCE.md says where each came from),
the project's own captures of a real llama-server b11434 (fixtures/engine-logs/real-b11434),
and its constructed fixtures, made by hand in each engine's format for what cannot run here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.read import read_text

from tests.conftest import CORPUS, FIXTURES

MiB = 1 << 20
GiB = 1 << 30
OWN = FIXTURES / "engine-logs"
REAL = OWN / "real-b11434"
LOGS = CORPUS / "engine-logs"
LLAMA, OLLAMA, VLLM = "llama.cpp", "ollama", "vllm"


def mib(*sizes: float) -> int:
    return sum(round(s * MiB) for s in sizes)


def gib(*sizes: float) -> int:
    return sum(round(s * GiB) for s in sizes)


def read_log(path: Path) -> EngineEvidence:
    """The evidence of one log; a test of a corpus log is skipped where ../shared is absent
    (outside CI), as the parametrized ones are by `corpus_files`."""
    if path.is_relative_to(CORPUS) and not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not beside the project (only in CI)")
    return read_text(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Reading:
    """What a log says; `failed` is a distinctive part of the engine's failure line."""

    engine: str | None = None
    backend: str | None = None
    gpu_backend: str | None = None
    layers: tuple[int | None, int | None] = (None, None)
    failed: str | None = None
    devices: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    gpu_bytes: int | None = None
    cpu_bytes: int | None = None
    verbosity: int | None = None
    overrides: int | None = None
    cpu_only: bool = False
    no_gpu_listed: bool = False
    known: bool = True


def reading(ev: EngineEvidence, failed: str | None) -> Reading:
    said = ev.gpu_failed
    return Reading(
        engine=ev.engine,
        backend=ev.backend,
        gpu_backend=ev.gpu_backend,
        layers=(ev.layers_offloaded, ev.layers_total),
        failed=failed if said is not None and failed is not None and failed in said else said,
        devices=ev.devices,
        found=ev.found_devices,
        gpu_bytes=ev.gpu_weight_bytes,
        cpu_bytes=ev.cpu_weight_bytes,
        verbosity=ev.verbosity,
        overrides=ev.cpu_override_tensors,
        cpu_only=ev.cpu_only_build,
        no_gpu_listed=ev.no_gpu_listed,
        known=ev.known,
    )
