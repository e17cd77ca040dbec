"""What a node pays on the nvidia-smi path with the GPU query looping: one run, side by side.

`placewatch run --gpu-sources nvidia-smi` at a 2 s interval against a nats-server this
script starts, as deployed (discovery on), on an 8-GPU node with 64 GPU processes and 16
shards: each shard a real sleeping process leading its own session with three children,
all four listed on the shard's GPU, placed through a shards file. nvidia-smi is the
interpreter stand-in of bench/tick_cost.py (a bare Python interpreter, `-I -S`, reading the
answers), which loops as nvidia-smi does with `--loop-ms`. In the same run:

- one spawn of the tool, `--query-gpu` once (the children's CPU, each run after the same
  pause as the worker's ticks): what a tick paid twice before the query looped;
- the worker's CPU (its pid, every thread, user and system, to the nanosecond where Linux
  gives the process's CPU-time clock) from its first telemetry on,
  over the telemetry it published: its part per tick, publish included, with the loop's
  reading of each pass between ticks and the compute-apps query it still runs when the
  GPUs' memory in use changes or its last answer is 30 s old;
- the tools' CPU over the same time: the looping child (the same pid throughout, or the
  figure is not printed) and every tool the worker ran and reaped;
- worker and tools together as a share of one core.

The telemetry over the window is the load: a worker that ticked under 95 % of its
intervals (bench/load.py) would show a smaller share than it costs; the script exits 1.

The stand-in's pass costs less than a real nvidia-smi's, which reads every GPU through the
driver each pass: the tools' figure is a floor. `--real`, on a node with an NVIDIA driver,
measures the node's own nvidia-smi instead (shards on GPU 0 as in tick_cost.py).

    python bench/loop_cost.py [--seconds S] [--interval S] [--spawns N] [--real] [--no-discover]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import anyio
import nats
import psutil
from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.footprint import NoTelemetry, process_cpu_s, telemetry_from  # noqa: E402
from bench.load import offered  # noqa: E402
from bench.servers import nats_server, node_env, worker_argv, worker_env  # noqa: E402
from bench.synthetic import query_apps_of, write_fake_nvidia_smi  # noqa: E402
from bench.tick_cost import (  # noqa: E402
    GPUS,
    PAUSE_S,
    PER_SHARD,
    SHARDS,
    cuda_shard_processes,
    shard_processes,
    shards_file,
)
from placewatch.schemas import NodeTelemetry, decode  # noqa: E402
from placewatch.worker.gpu.nvidia_smi import gpu_query_argv  # noqa: E402

RATIO_TARGET = 0.2
"""The worker's CPU a tick, at most this share of one spawn of the tool."""
CORE_TARGET_PCT = 0.5
"""Worker and tools together, at most this share of one core."""


class Measured(NamedTuple):
    worker: float
    tools: float
    wall: float
    ticks: int
    loop_pid: int | None
    tool_runs: int
    last: NodeTelemetry


def looping_worker(url: str, interval: float, shards: Path, *, discover: bool) -> list[str]:
    """`placewatch run` reading the node's GPUs through nvidia-smi (its GPU query looping) and
    its shards from `shards`."""
    return worker_argv(
        url,
        interval,
        *("--gpu-sources", "nvidia-smi", "--shards", str(shards), "--log-level", "warning"),
        *([] if discover else ["--no-discover"]),
    )


def one_spawn(tool: str, n: int) -> list[float]:
    """CPU seconds of each of `n` runs of the tool's GPU query, once, each after a pause."""
    argv = [tool, *gpu_query_argv()[1:]]
    each = []
    for _ in range(n):
        time.sleep(PAUSE_S)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        each.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return each


def tools_cpu(worker: psutil.Process) -> tuple[float, dict[int, float], str]:
    """CPU seconds of the worker's children it reaped, of each it has now, by pid; the
    command line of the looping one."""
    times = worker.cpu_times()
    reaped = times.children_user + times.children_system
    live: dict[int, float] = {}
    looping = ""
    for child in worker.children(recursive=True):
        try:
            t = child.cpu_times()
            live[child.pid] = t.user + t.system
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "--loop-ms=" in cmdline:
            looping = f"{child.pid}"
    return reaped, live, looping


async def measure(url: str, pid: int, seconds: float, calls: Path | None) -> Measured:
    """From the first telemetry after the loop's child has run a while: the worker's CPU,
    its tools', wall time, telemetry messages, the looping child's pid, tool runs."""
    nc = await nats.connect(url)
    seen: list[float] = []
    last: list[Msg] = []
    ready = anyio.Event()

    async def count(msg: Msg) -> None:
        seen.append(time.monotonic())
        last[:] = [msg]
        if len(seen) >= 3:  # the first tick reads once; the loop's passes come after
            ready.set()

    await nc.subscribe("placewatch.telemetry.*", cb=count)
    worker = psutil.Process(pid)
    await telemetry_from(worker, ready)
    await anyio.sleep(0.2)  # just after a tick, whose publish lands in the window before
    own_before = process_cpu_s(worker)
    reaped_before, live_before, loop_before = tools_cpu(worker)
    runs_before = runs(calls)
    started = time.monotonic()
    await anyio.sleep(seconds)
    own_after = process_cpu_s(worker)
    reaped_after, live_after, loop_after = tools_cpu(worker)
    wall = time.monotonic() - started
    ticks = sum(1 for t in seen if started <= t < started + wall)
    await nc.close()
    # A child that ran across the window counts from where it was; one that started in it,
    # whole; one that ended in it, in what its parent reaped (its part before: a little more).
    tools = reaped_after - reaped_before
    tools += sum(cpu - live_before.get(p, 0.0) for p, cpu in live_after.items())
    same = loop_before == loop_after and loop_before != ""
    telemetry = decode(last[0].data, NodeTelemetry, last[0].headers)
    return Measured(
        own_after - own_before,
        tools,
        wall,
        ticks,
        int(loop_after) if same else None,
        runs(calls) - runs_before,
        telemetry,
    )


def runs(calls: Path | None) -> int:
    """Tool runs so far, where the stand-in logs them (-1: not known)."""
    if calls is None:
        return -1
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def logging_tool(bin_dir: Path) -> Path:
    """A wrapper in front of the stand-in that logs each run: the log's path."""
    real = bin_dir / "nvidia-smi.real"
    (bin_dir / "nvidia-smi").rename(real)
    log = bin_dir.parent / "calls.log"
    wrapper = bin_dir / "nvidia-smi"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="measured wall time")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--spawns", type=int, default=30, help="spawns of the tool timed")
    parser.add_argument("--real", action="store_true", help="the node's own nvidia-smi")
    parser.add_argument(
        "--no-discover",
        action="store_true",
        help="passed to the worker: no walk over every process for engines (as tick_cost.py)",
    )
    args = parser.parse_args()
    processes = cuda_shard_processes if args.real else shard_processes
    with tempfile.TemporaryDirectory() as tmp_name, processes() as groups, nats_server() as url:
        tmp = Path(tmp_name)
        gpus = 1 if args.real else GPUS
        shards = shards_file(tmp, groups, gpus)
        if args.real:
            env, tool, calls = node_env(), "nvidia-smi", None
        else:
            holders = [(s % GPUS, pid) for s, pids in enumerate(groups) for pid in pids]
            bin_dir = write_fake_nvidia_smi(
                tmp, GPUS, query_apps_of(holders), python=sys.executable
            )
            tool = str(bin_dir / "nvidia-smi")
            env = worker_env(bin_dir)
        spawn = statistics.fmean(one_spawn(tool, args.spawns))
        if not args.real:
            calls = logging_tool(bin_dir)
        argv = looping_worker(url, args.interval, shards.path, discover=not args.no_discover)
        with open(tmp / "worker.log", "w") as log:
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
            try:
                m = anyio.run(measure, url, worker.pid, args.seconds, calls)
            except NoTelemetry as exc:
                sys.exit(f"loop_cost: {exc}; it said:\n{(tmp / 'worker.log').read_text()}")
            finally:
                worker.terminate()
                worker.wait(10)
        said = (tmp / "worker.log").read_text().strip()

    per_tick = m.worker / m.ticks
    tools_per_tick = m.tools / m.ticks
    pct = (m.worker + m.tools) / m.wall * 100
    ratio = per_tick / spawn
    before_pct = 2 * spawn / args.interval * 100
    source = next(s for s in m.last.sources if s.name == "nvidia-smi")
    shards_gpu = sum(1 for b in m.last.shards.values() if b.verdict == "gpu")
    print(
        f"loop cost: `placewatch run` at a {args.interval:g} s interval, nvidia-smi looping "
        f"({'the node' + chr(39) + 's own' if args.real else 'the interpreter stand-in'}), "
        f"{len(m.last.gpus)} GPUs, {SHARDS * PER_SHARD} GPU processes, {SHARDS} shards "
        f"({shards_gpu} judged gpu), discovery {'off' if args.no_discover else 'on'}; "
        f"{m.wall:.0f} s, {m.ticks} telemetry messages "
        f"(load {os.getloadavg()[0]:.2f})"
    )
    print(
        f"the source: ok {source.ok}, degraded {source.degraded}, error {source.error!r}; "
        f"tool runs in the window: {m.tool_runs if m.tool_runs >= 0 else 'not counted'}; "
        f"the looping child: {'pid ' + str(m.loop_pid) if m.loop_pid else 'NOT THE SAME ONE'}"
    )
    print(f"{'figure':<44}{'result':>12}{'target':>10}{'ratio':>8}")
    print(f"{'one spawn of the tool (--query-gpu once)':<44}{spawn * 1e3:>9.3f} ms")
    print(f"{'worker CPU a tick (publish included)':<44}{per_tick * 1e3:>9.3f} ms")
    print(
        f"{'worker a tick / one spawn':<44}{ratio:>12.3f}{RATIO_TARGET:>10.2f}"
        f"{ratio / RATIO_TARGET:>8.2f}"
    )
    print(f"{'tools CPU a tick (loop + compute-apps)':<44}{tools_per_tick * 1e3:>9.3f} ms")
    print(
        f"{'worker + tools, share of one core':<44}{pct:>10.3f} %{CORE_TARGET_PCT:>8.1f} %"
        f"{pct / CORE_TARGET_PCT:>8.2f}"
    )
    print(
        f"for scale, two spawns a tick (before the loop) alone: {before_pct:.3f} % of a core "
        f"at {args.interval:g} s"
    )
    if m.loop_pid is None:
        print("the looping child changed in the window: the tools' figure is not one child's")
    if said:
        print(f"the worker said:\n{said}")
    load = offered("ticks", asked_per_s=1 / args.interval, sent=m.ticks, window_s=m.wall, edge=1)
    print(load.line())
    if not load.met:
        sys.exit(1)


if __name__ == "__main__":
    main()
