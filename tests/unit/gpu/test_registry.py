"""Sources chosen per vendor at start, re-chosen when one fails, not probed every tick."""

from __future__ import annotations

import anyio
import pytest

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.worker.config import GPU_SOURCES
from placewatch.worker.gpu.nvidia_smi import NvidiaSmiSource
from placewatch.worker.gpu.registry import RECHECK_ABSENT_S, VendorChain, default_chains
from placewatch.worker.probe import ProbeRunner

Result = tuple[list[GpuSample], list[SourceStatus]]


def sample(chain: VendorChain) -> Result:
    return anyio.run(chain.sample, backend="asyncio")


def test_an_absent_vendor_is_looked_for_once_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    now = [1000.0]
    looked = []

    class Counting(NvidiaSmiSource):
        def unavailable(self) -> str | None:
            looked.append(now[0])
            return super().unavailable()

    chain = VendorChain("nvidia", [Counting(ProbeRunner())], clock=lambda: now[0])
    assert not chain.resting()
    gpus, statuses = sample(chain)
    assert gpus == [] and chain.absent
    assert [(s.name, s.error) for s in statuses] == [("nvidia-smi", "nvidia-smi not found on PATH")]
    now[0] += RECHECK_ABSENT_S / 2
    assert chain.resting()
    assert sample(chain)[1] == statuses
    assert looked == [1000.0]
    now[0] += RECHECK_ABSENT_S
    assert not chain.resting()
    sample(chain)
    assert len(looked) == 2


def test_every_source_has_a_setting_name_and_the_vendors_order_holds() -> None:
    every = default_chains(ProbeRunner())
    assert [(c.vendor, [s.name for s in c.candidates]) for c in every] == [
        ("nvidia", ["nvml", "nvidia-smi"]),
        ("amd", ["rocm-smi", "amd-smi"]),
        ("intel", ["xpu-smi", "intel-sysfs"]),
    ]
    assert sorted(GPU_SOURCES) == sorted(s.name for c in every for s in c.candidates)
    chosen = default_chains(ProbeRunner(), sources=["amd-smi", "nvidia-smi", "rocm-smi"])
    assert [(c.vendor, [s.name for s in c.candidates]) for c in chosen] == [
        ("nvidia", ["nvidia-smi"]),
        ("amd", ["rocm-smi", "amd-smi"]),
    ]
    assert [c.vendor for c in default_chains(ProbeRunner(), sources=["nvml"])] == ["nvidia"]
