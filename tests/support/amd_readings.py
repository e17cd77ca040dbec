"""What every AMD reading must be, whatever text a tool printed."""

from __future__ import annotations

import math

import msgspec

from placewatch.schemas import GpuSample


def assert_sane(gpus: list[GpuSample]) -> None:
    assert [g.index for g in gpus] == sorted({g.index for g in gpus})
    for gpu in gpus:
        # The wire contract's constraints hold: percent in 0..100, sizes and counts >= 0.
        assert msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSample) == gpu
        assert gpu.vendor == "amd"
        assert gpu.utilization_pct is None or 0 <= gpu.utilization_pct <= 100
        assert (gpu.activity is None) == (gpu.utilization_pct is None)
        for size in (gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes):
            assert size is None or size >= 0
        assert gpu.energy_j is None or (math.isfinite(gpu.energy_j) and gpu.energy_j >= 0)
        if gpu.health is not None:
            # A parser reads counts; only health.assess() judges them.
            assert (gpu.health.healthy, gpu.health.problems) == (True, [])
            assert gpu.health.pcie_gen is None or 1 <= gpu.health.pcie_gen <= 6
            assert all(e and e == e.lower() for e in gpu.health.clock_events)
