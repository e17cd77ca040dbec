"""Log flood: how late `placewatch run`'s ticks are while one engine log grows at 80 MB/s, and
how soon the newest line of a log already 50 GiB is read.

Step 1: `placewatch run --interval S` against a nats-server this script starts, with the
test suite's fake nvidia-smi and one shard, a sleeping process placed through a shards file,
whose log a writer process appends keyword lines to (`load_tensors: offloaded ...`, the
lines every reader looks at, the costliest to parse) at --rate MB/s. A subscriber on
`placewatch.telemetry.<node>` times each tick's arrival; a tick is late by how much the gap
before it passed the interval. The load offered is the log's growth over the measured
window, printed beside the result (`load:`, bench/load.py): a step whose writer offered
under 95 % of --rate fails (exit 1), having measured a lighter load than it says. The same is measured first with
the log idle, in the same run, so that what the machine itself adds is seen beside it.
Target: every tick within 10 % of its interval.

Step 2: a log of 50 GiB (sparse: a hole, then one life's banner and lines) followed for the
first time by the real EngineLogs, asked with a tick's deadline: how long its answer took,
and whether it holds the newest line. Target: within one interval.

    python bench/log_flood.py [--rate MB/S] [--interval S] [--seconds S]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import nats
from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import offered  # noqa: E402
from bench.servers import nats_server, worker_argv, worker_env  # noqa: E402
from bench.synthetic import query_apps_of, query_gpu  # noqa: E402
from placewatch.worker.deadline import Deadline  # noqa: E402
from placewatch.worker.engines.evidence.follow import EngineLogs, Log  # noqa: E402
from placewatch.worker.engines.evidence.source import PathLog  # noqa: E402

from tests.conftest import FakeGpuTools  # noqa: E402

LINE = "load_tensors: offloaded 1/33 layers to GPU; CUDA0 model buffer size = 12.00 MiB\n"
WRITER = """
import sys, time
rate, line = float(sys.argv[2]), sys.argv[3].encode()
step = 0.01
chunk = line * max(1, int(rate * step) // len(line))
with open(sys.argv[1], "ab", buffering=0) as out:
    due = time.monotonic()
    while True:
        out.write(chunk)
        due += len(chunk) / rate
        time.sleep(max(0.0, due - time.monotonic()))
"""
"""Appends `line` at `rate` bytes a second, catching up when it falls behind."""
WITHIN = 0.1


async def tick_arrivals(url: str, node: str, warmup: int, seconds: float) -> list[float]:
    """When each telemetry of `node` arrived, after `warmup` ticks, for `seconds`."""
    nc = await nats.connect(url)
    arrivals: list[float] = []

    async def arrived(msg: Msg) -> None:
        arrivals.append(time.monotonic())

    await nc.subscribe(f"placewatch.telemetry.{node}", cb=arrived)
    with anyio.fail_after(60):
        while len(arrivals) < warmup:  # noqa: ASYNC110 - the callback counts them
            await anyio.sleep(0.05)
    del arrivals[:]
    await anyio.sleep(seconds)
    await nc.close()
    return arrivals


def flood(args: argparse.Namespace, tmp: Path, rate_mb: float) -> bool:
    """Step 1 at `rate_mb` MB/s (0: the log idle); True when the load was offered."""
    tools = FakeGpuTools(tmp / "fake-gpu")
    shard = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    log = tmp / "chatty.log"
    log.write_text("")
    shards = tmp / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "chatty"\npid = {shard.pid}\ngpus = [0]\nlog_path = "{log}"\n'
    )
    tools.nvidia_smi(query_gpu(1, used_mib=400), query_apps_of([(0, shard.pid)]))
    rate = rate_mb * 1e6
    idle = ["sleep", "3600"]
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), str(rate), LINE] if rate else idle
    )
    with nats_server() as url, open(tmp / "worker.log", "w") as out:
        argv = worker_argv(url, args.interval, "--shards", str(shards), "--grace", "0",
                           "--no-discover", "--log-level", "warning")  # fmt: skip
        worker = subprocess.Popen(
            argv, env=tools.env(worker_env(tools.bin)), stdout=out, stderr=out
        )
        try:
            size, started = log.stat().st_size, time.monotonic()
            arrivals = anyio.run(tick_arrivals, url, "bench", 2, args.seconds, backend="asyncio")
            load = offered(
                "log bytes",
                asked_per_s=rate,
                sent=log.stat().st_size - size,
                window_s=time.monotonic() - started,
            )
        finally:
            worker.terminate()
            stopped = worker.wait(10)
            writer.kill()
            shard.kill()
            log.unlink()
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    late = [max(0.0, g - args.interval) for g in gaps]
    within = sum(g <= args.interval * (1 + WITHIN) for g in gaps)
    what = "one log of keyword lines" if rate else "one log, idle"
    print(
        f"{'flood' if rate else 'idle'}: `placewatch run --interval {args.interval:g}`, {what}, "
        f"{args.seconds:g} s measured (load {os.getloadavg()[0]:.2f})"
    )
    if rate:
        print(f"  {load.line()}")
    print(
        f"  ticks: {len(arrivals)} in {args.seconds:g} s; within {WITHIN:.0%} of the interval: "
        f"{within} of {len(gaps)}; late by p50 {statistics.median(late) * 1000:.0f} ms, "
        f"max {max(late) * 1000:.0f} ms; the worker exited {stopped} on SIGTERM"
    )
    return load.met or not rate


def sparse(args: argparse.Namespace, tmp: Path) -> None:
    """Step 2."""
    log = tmp / "huge.log"
    with log.open("wb") as out:
        out.truncate(50 << 30)
        out.seek(0, os.SEEK_END)
        out.write(b"\nbuild: 5400 (1a2b3c4d) with cc\n" + LINE.encode() * 1000)
        out.write(b"load_tensors: offloaded 33/33 layers to GPU\n")

    async def first_answer() -> tuple[float, int | None]:
        logs = EngineLogs()
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            started = time.monotonic()
            said = await logs.read(
                {"a": Log(PathLog(str(log), os.getpid()))},
                deadline=Deadline.for_tick(args.interval),
            )
            took = time.monotonic() - started
            tg.cancel_scope.cancel()
        return took, said["a"].layers_offloaded

    try:
        took, layers = anyio.run(first_answer, backend="asyncio")
    finally:
        log.unlink()
    newest = "its newest line read" if layers == 33 else f"NOT its newest line ({layers})"
    print(f"sparse: a 50 GiB log first followed: answered in {took * 1000:.1f} ms, {newest}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=80.0, help="MB/s the log grows (80)")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "idle").mkdir()
        (Path(tmp) / "flood").mkdir()
        flood(args, Path(tmp) / "idle", 0.0)
        met = flood(args, Path(tmp) / "flood", args.rate)
        sparse(args, Path(tmp))
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
