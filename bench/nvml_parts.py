"""Where the NVML tick's own part goes: the phases of one tick, each timed, against 1 ms.

The NVML tick is set against the driver's own reads plus 1 ms (bench/tick_cost.py): what
is over the reads is the worker's part. This script takes the same node (8 GPUs of the
stand-in library, 64 GPU processes in 16 shards placed through a shards file, discovery
off; `--real`: the node's own driver, the shards holding memory on GPU 0) and splits that
part, tick by tick, each tick after the same pause as the worker's loop sleeps:

- the tick, as `Pipeline.take` runs it: the read (the NVML read handed to a worker thread,
  the host sample, each GPU's health judged), judging the shards, building the sample;
- the same tick on a second pipeline whose NVML calls are timed in the thread that makes
  them (their CPU, the bindings' own included, less what the timing adds inside them): the
  driver's reads, which are not the worker's part (the timing's own Python around each call
  would be, so the phases are taken on the untimed pipeline);
- then, each after the same pause again: a call of nothing handed to a worker thread and
  back through the source's limiter, as the NVML read is (gpu/read_thread.py), and the
  host sample alone; beside them, not part of the tick, the same call handed to anyio's
  thread pool without the limiter (`anyio.to_thread.run_sync`), for comparison.

The NVML read's own Python is the read less those two and the driver's reads. The mean
of each over the ticks is the figure; what the thread hop and the host sample take
together is what any tick of this path pays before it reads a GPU or judges a shard.

    python bench/nvml_parts.py [--ticks N] [--real]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tick_cost import (  # noqa: E402
    GPUS,
    OVER_DRIVER_TARGET_MS,
    PAUSE_S,
    PROCESSES,
    SHARDS,
    TimedNvml,
    cuda_shard_processes,
    sampler,
    shard_processes,
    shards_file,
    stand_in_gpus,
)
from placewatch.worker.gpu.nvml import NvmlSource  # noqa: E402
from placewatch.worker.gpu.nvml import load as load_nvml  # noqa: E402
from placewatch.worker.gpu.registry import VendorChain  # noqa: E402
from placewatch.worker.pipeline import Pipeline  # noqa: E402

from tests.support.fake_nvml import FakeNvml  # noqa: E402

PHASES = (
    "the tick",
    "the driver's reads",
    "the worker's part",
    "handing a read to a worker thread",
    "the host sample",
    "the NVML read's own Python",
    f"judging {SHARDS} shards",
    "building the sample",
)
BESIDE = "anyio.to_thread.run_sync, beside"
"""Not a phase: what the hop costs through anyio's pool, timed the same way."""


def pipelines(
    groups: list[list[int]], where: Path, real: bool
) -> tuple[Pipeline, NvmlSource, Pipeline, TimedNvml, str]:
    """Two pipelines judging the shards `groups` (a shards file in `where`): one reading
    NVML as the worker does (and its source), one with its calls timed; the timer; what
    they read, in words.
    Each reads a module of its own: the node's library, or a stand-in serving 8 GPUs and the
    shards' processes."""
    if real:
        module, why_not = load_nvml()
        assert module is not None, why_not
        plain, timed, what = module, module, "the node's driver, every shard on GPU 0"
    else:
        gpus = stand_in_gpus(groups)
        plain, timed, what = FakeNvml(gpus), FakeNvml(gpus), f"{GPUS} GPUs of the stand-in library"
    timer = TimedNvml(timed)
    shards = shards_file(where, groups, 1 if real else GPUS)
    source = NvmlSource(plain)
    return (
        sampler(VendorChain("nvidia", [source]), shards),
        source,
        sampler(VendorChain("nvidia", [NvmlSource(timer)]), shards),
        timer,
        what,
    )


async def measure(
    pipeline: Pipeline, source: NvmlSource, timed: Pipeline, timer: TimedNvml, n: int
) -> dict[str, list[float]]:
    """n ticks, each after a pause and split into its phases; the same tick on the timed
    pipeline, for the driver's reads; a thread hop of nothing and the host sample alone.
    Each after a pause; CPU seconds of the whole process."""
    cpu = time.process_time
    found: dict[str, list[float]] = {phase: [] for phase in (*PHASES, BESIDE)}
    for _ in range(3):  # warm up: imports, the first host window, the shards' start times
        await pipeline.take()
        await timed.take()
    for _ in range(n):
        await anyio.sleep(PAUSE_S)
        started = cpu()
        reading = await pipeline.read()
        read = cpu()
        shards = await pipeline.judge(reading)
        judged = cpu()
        pipeline.sample(reading, shards)
        built = cpu()
        assert [b.verdict for b in shards.briefs] == ["gpu"] * SHARDS, shards.briefs
        await anyio.sleep(PAUSE_S)
        timer.reset()
        await timed.take()
        driver = timer.reads_s
        await anyio.sleep(PAUSE_S)
        before = cpu()
        await source.thread.run(lambda: None)
        hop = cpu() - before
        await anyio.sleep(PAUSE_S)
        before = cpu()
        await anyio.to_thread.run_sync(lambda: None)
        found[BESIDE].append(cpu() - before)
        await anyio.sleep(PAUSE_S)
        before = cpu()
        pipeline.sampler.host.sample()
        host = cpu() - before
        tick = built - started
        found["the tick"].append(tick)
        found["the driver's reads"].append(driver)
        found["the worker's part"].append(tick - driver)
        found["handing a read to a worker thread"].append(hop)
        found["the host sample"].append(host)
        found["the NVML read's own Python"].append(read - started - driver - hop - host)
        found[f"judging {SHARDS} shards"].append(judged - read)
        found["building the sample"].append(built - judged)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument(
        "--real", action="store_true", help="the node's own NVML, real GPU shards on GPU 0"
    )
    args = parser.parse_args()
    processes = cuda_shard_processes if args.real else shard_processes
    with tempfile.TemporaryDirectory() as tmp_name, processes() as groups:
        pipeline, source, timed, timer, what = pipelines(groups, Path(tmp_name), args.real)
        found = anyio.run(measure, pipeline, source, timed, timer, args.ticks, backend="asyncio")

    mean = {phase: statistics.fmean(each) for phase, each in found.items()}
    part = mean["the worker's part"]
    print(
        f"NVML tick by phase: {what}, {PROCESSES} GPU processes, {SHARDS} shards, "
        f"{args.ticks} ticks, each after a {PAUSE_S:g} s pause, CPU ms (load "
        f"{os.getloadavg()[0]:.2f})"
    )
    print(f"{'phase':<42}{'mean':>8}{'p50':>8}{'of the part':>13}")
    for phase, each in found.items():
        share = f"{mean[phase] / part:>13.2f}" if phase in PHASES[2:] else ""
        indent = "  " if phase not in PHASES[:3] else ""
        print(
            f"{indent + phase:<42}{mean[phase] * 1e3:>8.3f}"
            f"{statistics.median(each) * 1e3:>8.3f}{share}"
        )
    fixed = mean["handing a read to a worker thread"] + mean["the host sample"]
    print(
        f"target: the worker's part at most {OVER_DRIVER_TARGET_MS:g} ms: {part * 1e3:.3f} ms, "
        f"{part * 1e3 / OVER_DRIVER_TARGET_MS:.2f} of it; the thread hop and the host sample "
        f"alone, which every tick of this path pays: {fixed * 1e3:.3f} ms, "
        f"{fixed * 1e3 / OVER_DRIVER_TARGET_MS:.2f} of it"
    )


if __name__ == "__main__":
    main()
