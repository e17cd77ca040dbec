"""NVML calls a sample makes for 8 GPUs and 64 processes, as the driver's library counts them.

The real nvidia-ml-py runs over a stand-in for libnvidia-ml.so (bench/nvml_library.py) that
answers as 8 H200s of the project's capture (tests/fixtures/nvidia-smi/h200-*), each with 8
processes that ran since the last read, and counts every C call, the bindings' own second
calls (a list's size, then the list) included. placewatch's NVML source reads them as the
worker does, shard activity wanted: its first tick (what does not change, once), its steady
ticks, and a tick past SLOW_EVERY_S (the slow readings again; the cadence's clock is moved,
not waited for).

Beside it, gpustat's own query (`GPUStatCollection.new_query()`, each a sample) over the same
library, where gpustat can be imported (`--with DIR`: a folder holding gpustat and blessed,
e.g. unpacked from `pip download`); else the figure offered for the same readings in the
project's issue 63: 124 calls a sample for 8 GPUs, counted with a stand-in C library.

    python bench/nvml_calls.py [--ticks N] [--with DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nvml_library import loaded  # noqa: E402
from placewatch.schemas import GpuProcess, GpuSample  # noqa: E402
from placewatch.worker.gpu.nvml import NvmlSource  # noqa: E402
from placewatch.worker.gpu.nvml.cadence import SLOW_EVERY_S  # noqa: E402

from tests.support.fake_nvml import FakeNvml, UtilizationSample, h200  # noqa: E402

GPUS, PER_GPU = 8, 8
GPUSTAT_OFFERED = 124
"""gpustat 1.1.1's calls a sample for 8 GPUs with their processes (issue 63)."""


def node() -> list[GpuSample]:
    """GPUS H200s as the capture reads, each with PER_GPU processes, and the readings an
    H200 gives NVML that the CSV capture lacks: the energy counter, the memory's temperature,
    encoder and decoder (h200-q.xml: 36 C, 0 %, 0 %). Its fan and page retirement it refuses,
    as the capture says (N/A)."""
    (h,) = h200()
    return [
        msgspec.structs.replace(
            h,
            index=i,
            energy_j=123_456.0,
            memory_temperature_c=36.0,
            encoder_util_pct=0.0,
            decoder_util_pct=0.0,
            uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
            bus_id=f"00000000:{0x18 + i:02X}:00.0",
            processes=[
                GpuProcess(pid=10_000 + PER_GPU * i + n, used_bytes=(1 + n) << 30)
                for n in range(PER_GPU)
            ],
        )
        for i in range(GPUS)
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ran(fake: FakeNvml, tick: int) -> None:
    """Every process ran on its GPU since the last read: one sample each, newer."""
    for device in fake.devices:
        fake.samples[device.sample.index] = [
            UtilizationSample(pid=p.pid, timeStamp=tick * 1_000_000, smUtil=40, memUtil=10)
            for p in device.sample.processes
        ]


def placewatch_ticks(ticks: int) -> tuple[Counter[str], list[Counter[str]], Counter[str]]:
    """The calls of the first tick, of each steady tick, and of the tick past SLOW_EVERY_S."""
    fake = FakeNvml(node())
    clock = Clock()
    with loaded(fake) as (pynvml, library):
        source = NvmlSource(pynvml)
        if hasattr(source, "cadence"):  # a tree before the cadence reads everything each tick
            source.cadence.clock = clock
        counts = []
        for tick in range(ticks):
            if tick == ticks - 1:
                clock.now += SLOW_EVERY_S
            ran(fake, tick + 1)
            library.calls.clear()
            gpus, status = anyio.run(source.sample, "in-process", backend="asyncio")
            assert status.ok and len(gpus) == GPUS, status
            assert sum(len(g.processes) for g in gpus) == GPUS * PER_GPU
            assert all(p.sm_pct == 40 for g in gpus for p in g.processes)
            counts.append(Counter(library.calls))
    return counts[0], counts[1:-1], counts[-1]


def gpustat_queries(where: str | None, queries: int) -> list[Counter[str]] | str:
    """The calls of each gpustat query over the same GPUs, or why gpustat cannot run."""
    if where:
        sys.path.insert(0, where)
    try:
        import gpustat  # type: ignore[import-not-found,unused-ignore]  # optional
    except ImportError as exc:
        return f"gpustat cannot be imported here ({exc})"
    fake = FakeNvml(node())
    counts = []
    with loaded(fake) as (_, library):
        for tick in range(queries):
            ran(fake, tick + 1)
            library.calls.clear()
            found = gpustat.new_query()
            assert len(found.gpus) == GPUS
            counts.append(Counter(library.calls))
    return counts


def table(columns: dict[str, Counter[str]]) -> None:
    names = sorted({name for c in columns.values() for name in c})
    print(f"{'NVML function':<46}" + "".join(f"{title:>12}" for title in columns))
    for name in names:
        print(f"{name:<46}" + "".join(f"{c[name]:>12g}" for c in columns.values()))
    print(f"{'total a sample':<46}" + "".join(f"{c.total():>12g}" for c in columns.values()))
    print(
        f"{'a GPU (total / 8)':<46}"
        + "".join(f"{c.total() / GPUS:>12.2f}" for c in columns.values())
    )


def mean(counts: list[Counter[str]]) -> Counter[str]:
    names = {name for c in counts for name in c}
    return Counter({name: statistics.fmean(c[name] for c in counts) for name in names})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20, help="ticks in all, at least 3")
    parser.add_argument("--with", dest="where", help="a folder to import gpustat from")
    args = parser.parse_args()
    first, steady, slow = placewatch_ticks(max(args.ticks, 3))
    columns: dict[str, Any] = {"first": first, "steady": mean(steady), "slow": slow}
    gpustat = gpustat_queries(args.where, len(steady))
    if isinstance(gpustat, list):
        columns["gpustat"] = mean(gpustat)
    print(
        f"NVML calls a sample: {GPUS} H200s (stand-in library under nvidia-ml-py), "
        f"{GPUS * PER_GPU} processes that ran; placewatch's first tick, the mean of "
        f"{len(steady)} steady ticks, a tick past the slow cadence ({SLOW_EVERY_S:g} s)"
    )
    table(columns)
    steady_total = columns["steady"].total()
    if isinstance(gpustat, list):
        versus, what = columns["gpustat"].total(), "gpustat's own query, counted beside it"
    else:
        versus, what = GPUSTAT_OFFERED, f"gpustat, the figure offered in issue 63: {gpustat}"
    print(
        f"target: fewer calls a sample than gpustat in steady state: {steady_total:g} against "
        f"{versus:g} ({what}): {'met' if steady_total < versus else 'not met'}, "
        f"{steady_total / versus:.2f} of it"
    )


if __name__ == "__main__":
    main()
