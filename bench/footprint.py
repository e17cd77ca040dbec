"""The worker's footprint: RSS and CPU of `placewatch run`, the worker process alone.

`placewatch run` at a 2 s interval against a nats-server this script starts,
with a fake nvidia-smi on PATH answering for 8 GPUs and 64 processes (`sh`
and `cat`: the tool's own processes are not counted anyway). Measured from
the first telemetry on: RSS every half second (the last and the largest),
the worker's CPU time (its own threads, no children; the process's CPU-time clock) over
the wall time, and its wakes: voluntary context switches of all its threads
a second (each time one slept and was woken), a count this VM's noise does
not move as it moves the CPU figure. dcgm-exporter, for comparison, is reported at 71 to 155 MiB RSS.
With `--real`, on a GPU node, the worker reads the node's own GPUs instead
(NVML where the driver answers) and the script says which source it used.
It also splits the last RSS into the worker's own (anonymous, private) memory and the
files it maps, and names the interpreter and the site `.pth` files that import
modules at its start: a crowded environment's (a machine image's shared venv)
add to every process of it, the worker's too. Its telemetry over the window is its load:
a worker that ticked under 95 % of its intervals (bench/load.py) would show a smaller CPU
share than it costs, and the script then exits 1.

Its growth: the RSS and the private memory, sampled together every half second, fitted by
least squares over the run once its first tenth is past (imports and first ticks), in MiB
an hour, and the last tenth's median against the first's. The target, no growth, is taken as
under 1 MiB an hour (a page of the allocator's here and there moves a short run's fit by
more: the figure means something over an hour, `--seconds 3600`). What grew in the runs
measured grew by the tick, so at a shorter `--interval` the script also gives the growth over
an hour's ticks at 2 s (1,800): the fitted slope a tick, times 1,800; `--interval 0.1
--seconds 180` runs them.

    python bench/footprint.py [--seconds S] [--interval S] [--real] [--gpu-sources LIST]
"""

from __future__ import annotations

import argparse
import os
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

from bench.load import offered  # noqa: E402
from bench.rss_stages import rss as rss_split  # noqa: E402
from bench.rss_stages import startup_pth  # noqa: E402
from bench.servers import nats_server, node_env, worker_argv, worker_env  # noqa: E402
from bench.synthetic import query_apps, write_fake_nvidia_smi  # noqa: E402
from placewatch.schemas import NodeTelemetry, decode  # noqa: E402

RSS_TARGET_MIB = 45.0
PRIVATE_TARGET_MIB = 40.0
GROWTH_TARGET_MIB_H = 1.0
"""No growth over an hour, less what the allocator moves by."""
HOUR_INTERVAL_S = 2.0
"""The interval an hour's growth is counted at: 1,800 ticks."""
CPU_TARGET_PCT = 0.5
DCGM_EXPORTER_MIB = (71, 155)


def wakes(pid: int) -> int:
    """Voluntary context switches of every thread of `pid` so far (threads that ended: lost)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def process_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds `proc` has run, all its threads (those that exited too), user and system.

    Read from the process's CPU-time clock where Linux gives one (clock_gettime of the
    clock id made from its pid, as the kernel's MAKE_PROCESS_CPUCLOCK does: nanoseconds);
    elsewhere from its user and system times, which move in clock ticks (10 ms), too coarse
    for a worker that runs a few ms every 2 s.
    """
    try:
        return time.clock_gettime((~proc.pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    except (OSError, OverflowError):
        times = proc.cpu_times()
        return times.user + times.system


class NoTelemetry(Exception):
    """The worker sent no telemetry: it exited first, or a minute went by."""


def growth(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """Of (seconds, MiB) samples: the least-squares slope in MiB an hour and the last
    tenth's median less the first's, both over the samples once their first tenth is past."""
    kept = samples[len(samples) // 10 :]
    if len(kept) < 2:
        return 0.0, 0.0
    times, sizes = [t for t, _ in kept], [m for _, m in kept]
    slope = statistics.linear_regression(times, sizes).slope if len(set(times)) > 1 else 0.0
    tenth = max(len(kept) // 10, 1)
    return slope * 3600, statistics.median(sizes[-tenth:]) - statistics.median(sizes[:tenth])


class Measured(NamedTuple):
    rss: list[tuple[float, float]]
    """(seconds since the first telemetry, MiB) every half second."""
    private: list[tuple[float, float]]
    """The same of RssAnon."""
    cpu: float
    wall: float
    messages: int
    wakes: int
    split: dict[str, float]
    last: NodeTelemetry


async def telemetry_from(proc: psutil.Process, seen: anyio.Event) -> None:
    """Until `seen` is set by the worker's telemetry; NoTelemetry if it exits first or a
    minute goes by."""
    with anyio.move_on_after(60):
        while not seen.is_set():
            if proc.status() == psutil.STATUS_ZOMBIE:
                raise NoTelemetry("the worker exited before its first telemetry")
            await anyio.sleep(0.1)
    if not seen.is_set():
        raise NoTelemetry("no telemetry from the worker within 60 s")


async def measure(url: str, pid: int, seconds: float) -> Measured:
    """RSS samples, CPU seconds, wall seconds, telemetry messages seen, wakes, from the first
    message on, and the last message."""
    nc = await nats.connect(url)
    seen: list[float] = []
    first = anyio.Event()
    last: list[Msg] = []

    async def count(msg: Msg) -> None:
        seen.append(time.monotonic())
        last[:] = [msg]
        first.set()

    await nc.subscribe("placewatch.telemetry.*", cb=count)
    proc = psutil.Process(pid)
    await telemetry_from(proc, first)
    before = process_cpu_s(proc)
    woken = wakes(pid)
    started = time.monotonic()
    rss: list[tuple[float, float]] = []
    private: list[tuple[float, float]] = []

    def sample() -> dict[str, float]:
        now, at = rss_split(pid), time.monotonic() - started
        rss.append((at, now["VmRSS"]))
        private.append((at, now["RssAnon"]))
        return now

    while time.monotonic() - started < seconds:
        sample()
        await anyio.sleep(0.5)
    after = process_cpu_s(proc)
    woken = wakes(pid) - woken
    wall = time.monotonic() - started
    split = sample()
    messages = sum(1 for t in seen if t >= started)
    await nc.close()
    cpu = after - before
    telemetry = decode(last[0].data, NodeTelemetry, last[0].headers)
    return Measured(rss, private, cpu, wall, messages, woken, split, telemetry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--real", action="store_true", help="the node's own GPUs and tools")
    parser.add_argument(
        "--gpu-sources",
        help="passed to the worker: the GPU sources it may read (all, by default), "
        "e.g. nvidia-smi to leave NVML out",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, nats_server() as url:
        if args.real:
            env = node_env()
        else:
            env = worker_env(write_fake_nvidia_smi(Path(tmp), 8, query_apps(8, 64)))
        argv = worker_argv(
            url,
            args.interval,
            "--log-level",
            "warning",
        )
        if args.gpu_sources:
            argv += ["--gpu-sources", args.gpu_sources]
        with open(Path(tmp) / "worker.log", "w") as log:
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
            try:
                rss, private, cpu, wall, messages, woken, split, last = anyio.run(
                    measure, url, worker.pid, args.seconds
                )
            except NoTelemetry as exc:
                said = (Path(tmp) / "worker.log").read_text().strip()
                sys.exit(f"footprint: {exc}; it said:\n{said}")
            finally:
                worker.terminate()
                worker.wait(10)
        said = (Path(tmp) / "worker.log").read_text().strip()

    end, peak = rss[-1][1], max(m for _, m in rss)
    pct = cpu / wall * 100
    print(
        f"footprint of `placewatch run` at a {args.interval:g} s interval over {wall:.0f} s, "
        f"{messages} telemetry messages (load {os.getloadavg()[0]:.2f})"
    )
    read = ", ".join(f"{s.name} {s.latency_ms} ms" for s in last.sources if s.ok)
    print(f"it read {len(last.gpus)} GPUs through {read or 'no source'}")
    print(f"{'figure':<24}{'result':>12}{'target':>10}{'ratio':>8}")
    print(
        f"{'RSS at the end':<24}{end:>8.1f} MiB{RSS_TARGET_MIB:>6.0f} MiB{end / RSS_TARGET_MIB:>8.2f}"
    )
    print(
        f"{'RSS, largest':<24}{peak:>8.1f} MiB{RSS_TARGET_MIB:>6.0f} MiB{peak / RSS_TARGET_MIB:>8.2f}"
    )
    print(
        f"{'CPU, one core':<24}{pct:>10.3f} %{CPU_TARGET_PCT:>8.1f} %{pct / CPU_TARGET_PCT:>8.2f}"
    )
    print(f"{'wakes a second':<24}{woken / wall:>10.1f}")
    anon, mapped = split["RssAnon"], split["RssFile"]
    print(
        f"{'private at the end':<24}{anon:>8.1f} MiB{PRIVATE_TARGET_MIB:>6.0f} MiB"
        f"{anon / PRIVATE_TARGET_MIB:>8.2f}"
    )
    for name, samples in (("RSS", rss), ("private", private)):
        slope, moved = growth(samples)
        print(
            f"{name + ' growth':<24}{slope:>+7.2f} MiB/h{GROWTH_TARGET_MIB_H:>5.0f} MiB/h"
            f"{abs(slope) / GROWTH_TARGET_MIB_H:>8.2f}   (the last tenth's median {moved:+.2f} MiB "
            f"on the first's, over {wall:.0f} s)"
        )
    if args.interval != HOUR_INTERVAL_S and messages:
        # A run at a short interval puts an hour's ticks at 2 s into minutes: its slope a
        # tick times those ticks is the hour's growth, where what grows grows by the tick.
        ticks_h = 3600 / HOUR_INTERVAL_S
        for name, samples in (("RSS", rss), ("private", private)):
            per_tick = growth(samples)[0] / 3600 * wall / messages
            print(
                f"{name + ' growth':<24}{per_tick * ticks_h:>+7.2f} MiB{GROWTH_TARGET_MIB_H:>7.0f} MiB"
                f"{abs(per_tick * ticks_h) / GROWTH_TARGET_MIB_H:>8.2f}   (over {ticks_h:,.0f} "
                f"ticks, an hour's at {HOUR_INTERVAL_S:g} s: the slope a tick over {messages:,})"
            )
    print(f"RSS at the end: {anon:.1f} MiB its own (anonymous), {mapped:.1f} MiB of mapped files")
    pth = ", ".join(startup_pth()) or "none"
    print(f"interpreter: Python {sys.version.split()[0]} at {sys.executable}")
    print(f"site .pth files that import at its start: {pth}")
    low, high = DCGM_EXPORTER_MIB
    print(f"RSS against dcgm-exporter's {low} to {high} MiB: {peak / low:.2f} to {peak / high:.2f}")
    if said:
        print(f"the worker said:\n{said}")
    load = offered("ticks", asked_per_s=1 / args.interval, sent=messages, window_s=wall, edge=1)
    print(load.line())
    if not load.met:
        sys.exit(1)


if __name__ == "__main__":
    main()
