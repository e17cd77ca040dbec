"""What every AMD reading must be, whatever text a tool printed."""

from __future__ import annotations

import msgspec

from placewatch.schemas import GpuSample


def assert_sane(gpus: list[GpuSample]) -> None:
    assert [g.index for g in gpus] == sorted({g.index for g in gpus})
    for gpu in gpus:
        # The wire contract's constraints hold: percent in 0..100, sizes >= 0.
        msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSample)
        assert gpu.vendor == "amd"
        assert gpu.utilization_pct is None or 0 <= gpu.utilization_pct <= 100
        assert (gpu.activity is None) == (gpu.utilization_pct is None)
        for size in (gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes):
            assert size is None or size >= 0
