"""`bench/nvml_parts.py` splits a judged NVML tick into the phases it names."""

from __future__ import annotations

from pathlib import Path

import anyio

from bench import nvml_parts
from bench.tick_cost import GPUS, SHARDS, shard_processes
from placewatch.worker.gpu.nvml import NvmlSource


def test_a_tick_of_the_stand_in_is_split_into_the_driver_s_reads_and_the_worker_s_phases(
    tmp_path: Path,
) -> None:
    with shard_processes() as groups:
        plain, source, timed, timer, what = nvml_parts.pipelines(groups, tmp_path, real=False)
        assert what == f"{GPUS} GPUs of the stand-in library"
        assert plain.sampler.chains[0].candidates == [source]
        assert isinstance(source, NvmlSource)
        assert source._nvml is not timer._nvml  # a stand-in each: neither's state the other's
        # measure() itself asserts that every shard was judged on its GPU.
        found = anyio.run(nvml_parts.measure, plain, source, timed, timer, 2, backend="asyncio")

    assert list(found) == [*nvml_parts.PHASES, nvml_parts.BESIDE]
    assert all(len(each) == 2 for each in found.values())
    for tick, reads, part in zip(
        found["the tick"], found["the driver's reads"], found["the worker's part"], strict=True
    ):
        assert 0 < reads < tick and part == tick - reads
    # Eight GPUs of readings a tick went through the timed bindings (a steady tick's nine
    # calls each: nvml/cadence.py), and each phase took time.
    assert timer.calls >= GPUS * 9
    hop = "handing a read to a worker thread"
    for phase in (hop, nvml_parts.BESIDE, "the host sample", f"judging {SHARDS} shards"):
        assert min(found[phase]) > 0, phase
