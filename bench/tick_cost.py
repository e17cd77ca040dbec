"""The CPU one tick costs the worker's own process, against spawning the GPU tool.

An 8-GPU node with 64 GPU processes and 16 shards: each shard is a real
sleeping process leading its own session with three children (as vLLM's
workers or an Ollama runner are), all four listed on the shard's GPU, placed
through a shards file; discovery is off. Five paths, one run, their ticks
taken in turn (one of each, then the next of each), so that the VM's slow
and fast minutes fall on all of them alike:

- nvidia-smi, floor: the worker runs the two CSV queries a tick; the tool is
  the cheapest one possible, `sh` and `cat` of the answer.
- nvidia-smi, interpreter: the same answers from a bare Python interpreter
  (`-I -S`), a dynamically linked program mapping a few MB of code and
  reading files; its CPU per run is close to what `time nvidia-smi
  --query-gpu` shows on 1- and 2-GPU machines (8 to 12 ms), still below an
  8-GPU node's, where the tool also talks to the driver for every GPU.
- NVML in process (a stand-in library serving the same GPUs): no child.
- NVML, its calls timed: the same, each NVML call the tick makes timed in the thread that
  makes it (its CPU, `time.thread_time`): the driver's own reads, as the bindings make
  them, which the NVML tick is set against (at most those plus 1 ms). The timing costs this
  path a little; the NVML path's own figure is the untimed one beside it.

The worker's CPU is its own (every thread; user and system, system shown
apart), the spawn's is the children's, counted over the ticks alone; the
mean is the figure, the median and 90th percentile of the ticks show their
spread. Its wakes are the times a thread of it slept and was woken in a
tick (voluntary context switches): on a machine that charges for each wake
(this VM does, milliseconds at some hours), what a tick costs follows them.
Between ticks the script pauses past the host sampler's CPU window, as the
worker's loop sleeps out its interval, so that each tick does what a
worker's does, caches as cold. A last row takes the shards away, to show
what judging them costs. Below the table, each timed after the same pause
in every round: for each tool, the least any tick on its path can cost
(its two queries run with a bare subprocess.run and their answers parsed,
nothing else), and the parse alone, cold and again at once, for what this
machine charges for a pause at the time.

On a node with an NVIDIA driver, `--real` measures the node's own nvidia-smi
and NVML instead, with 16 shards of 4 processes that each hold memory on
GPU 0 through the driver (tests/support/cuda_holder.py): the ratio is then against a
spawn of the real tool.

    python bench/tick_cost.py [--ticks N] [--real]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synthetic import query_apps_of, query_gpu, write_fake_nvidia_smi  # noqa: E402
from placewatch.schemas import GpuSample  # noqa: E402
from placewatch.worker.gpu.nvidia_smi import TOOL as NVIDIA_SMI  # noqa: E402
from placewatch.worker.gpu.nvidia_smi import (  # noqa: E402
    NvidiaSmiSource,
    apps_query_argv,
    gpu_query_argv,
)
from placewatch.worker.gpu.nvidia_smi.query_csv import (  # noqa: E402
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)
from placewatch.worker.gpu.nvml import NvmlSource  # noqa: E402
from placewatch.worker.gpu.nvml import load as load_nvml  # noqa: E402
from placewatch.worker.gpu.registry import VendorChain  # noqa: E402
from placewatch.worker.host import MIN_WINDOW_S, HostSampler  # noqa: E402
from placewatch.worker.pipeline import Pipeline  # noqa: E402
from placewatch.worker.probe import ProbeRunner  # noqa: E402
from placewatch.worker.sampler import NodeSampler  # noqa: E402
from placewatch.worker.shards.placements import ShardsFile  # noqa: E402
from placewatch.worker.shards.shard_pass import ShardPass  # noqa: E402

from tests.support.fake_nvml import FakeNvml  # noqa: E402

GPUS, SHARDS, PER_SHARD = 8, 16, 4
PROCESSES = SHARDS * PER_SHARD
CUDA_HOLDER = ROOT / "tests" / "support" / "cuda_holder.py"
SPAWNS_PER_TICK = 2  # --query-gpu and --query-compute-apps
TIMED = "NVML, its calls timed"


PAUSE_S = MIN_WINDOW_S + 0.05
NVML_TARGET_MS = 2.0
OVER_DRIVER_TARGET_MS = 1.0
"""The NVML tick may cost at most the driver's own reads plus this."""


class TimedNvml:
    """The NVML module (or its stand-in) with each of its functions timed: the CPU its calls
    took in the threads that made them, the bindings' own included. Constants and record
    types pass through; a function pointer the bindings hand out is timed too."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.seconds = 0.0
        self.calls = 0
        self.by_call: dict[str, float] = {}
        """CPU seconds by NVML function since the last reset, the timing's own included."""
        self.overhead_s = self._overhead()
        """What the timing itself adds to each call's figure (two clock reads, each a system
        call): the least of many timed calls of nothing."""

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0
        self.by_call = {}

    @property
    def reads_s(self) -> float:
        """The CPU of the calls timed since the last reset, less the timing's own."""
        return max(self.seconds - self.calls * self.overhead_s, 0.0)

    def _overhead(self) -> float:
        nothing = self._timed(lambda: None, "nothing")
        least = float("inf")
        for _ in range(2000):
            before = self.seconds
            nothing()
            least = min(least, self.seconds - before)
        self.reset()
        return least

    def _timed(self, function: Any, name: str) -> Any:
        def call(*args: Any) -> Any:
            started = time.thread_time()
            try:
                return function(*args)
            finally:
                took = time.thread_time() - started
                self.seconds += took
                self.calls += 1
                self.by_call[name] = self.by_call.get(name, 0.0) + took

        return call

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._nvml, name)
        if name == "_nvmlGetFunctionPointer":  # the lookup is no read; the call it gives is
            timed = lambda call, *a: self._timed(found(call, *a), call)  # noqa: E731
        elif name.startswith("nvml") and callable(found) and not isinstance(found, type):
            timed = self._timed(found, name)
        else:
            return found
        setattr(self, name, timed)  # looked up once
        return timed


def cpu(who: int) -> tuple[float, float]:
    """User and system CPU seconds."""
    usage = resource.getrusage(who)
    return usage.ru_utime, usage.ru_stime


def wakes() -> int:
    """Voluntary context switches of this process's threads so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


class Cost:
    """One path's CPU per tick: the worker's own (each tick's, and system apart), the tools'."""

    def __init__(self) -> None:
        self.own: list[float] = []
        self.system = 0.0
        self.children = 0.0
        self.wakes = 0

    def add(self, own: tuple[float, float], children: tuple[float, float], wakes: int) -> None:
        self.own.append(sum(own))
        self.system += own[1]
        self.children += sum(children)
        self.wakes += wakes

    @property
    def mean(self) -> float:
        return statistics.fmean(self.own)

    @property
    def system_mean(self) -> float:
        return self.system / len(self.own)

    @property
    def spawn(self) -> float:
        """CPU seconds of one tool run (0 for a path that runs none)."""
        return self.children / len(self.own) / SPAWNS_PER_TICK

    def quantile(self, q: float) -> float:
        ordered = sorted(self.own)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def shard_processes() -> Iterator[list[list[int]]]:
    """SHARDS sleeping session leaders with PER_SHARD - 1 children each: their pids."""
    sleep = shutil.which("sleep") or "sleep"
    script = " & ".join([f"{sleep} 3600"] * (PER_SHARD - 1)) + " & wait"
    procs = [
        subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True) for _ in range(SHARDS)
    ]
    try:
        yield [[p.pid, *children_of(p.pid)] for p in procs]
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextmanager
def cuda_shard_processes() -> Iterator[list[list[int]]]:
    """SHARDS session leaders holding memory on GPU 0, each with PER_SHARD - 1 children
    holding it too: their pids."""
    argv = [sys.executable, str(CUDA_HOLDER), "--mib", "64", "--children", str(PER_SHARD - 1)]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
        for _ in range(SHARDS)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready", "a shard did not take GPU memory"
        yield [[p.pid, *children_of(p.pid)] for p in procs]
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


def children_of(pid: int) -> list[int]:
    deadline = time.monotonic() + 10
    children: list[psutil.Process] = []
    while len(children) < PER_SHARD - 1 and time.monotonic() < deadline:
        children = psutil.Process(pid).children()
        time.sleep(0.01)
    assert len(children) == PER_SHARD - 1, "shard children did not start"
    return [c.pid for c in children]


def shards_file(where: Path, groups: list[list[int]], gpus: int) -> ShardsFile:
    path = where / "shards.toml"
    path.write_text(
        "".join(
            f'[[shard]]\nid = "shard-{s:02d}"\npid = {pids[0]}\ngpus = [{s % gpus}]\n\n'
            for s, pids in enumerate(groups)
        )
    )
    return ShardsFile(path)


def sampler(chain: VendorChain, shards: ShardsFile | None) -> Pipeline:
    judged = ShardPass("bench", "bench", grace_s=0.0, shards_file=shards, discovery=False)
    return Pipeline("bench", 2.0, NodeSampler([chain], HostSampler()), judged)


@dataclass
class Setup:
    """The paths to measure, the tool spawns to compare with, and the parts to time."""

    what: str
    gpus: int
    paths: dict[str, Pipeline]
    spawns: dict[str, str]  # column title: the path whose tool runs are the spawn
    parse: Callable[[], object]
    least: dict[str, Callable[[], object]]
    """Under each spawn's title, the least a tick on its path can do: both runs of its
    tool, bare, and the parse."""
    driver: dict[str, tuple[str, TimedNvml]] = field(default_factory=dict)
    """An NVML path: the path of the same reads timed call by call, and their timer."""


def both_answers(gpu_answer: str, apps_answer: str) -> object:
    """Both answers parsed, as a tick on the nvidia-smi path does."""
    return parse_gpus(gpu_answer), parse_compute_apps(apps_answer)


def bare_runs(tool: str) -> Callable[[], object]:
    """Both queries run with subprocess.run, as plainly as Python can, and parsed."""

    def run() -> object:
        gpu_answer, apps_answer = (
            subprocess.run([tool, *argv[1:]], capture_output=True, text=True, check=True).stdout
            for argv in (gpu_query_argv(), apps_query_argv())
        )
        return both_answers(gpu_answer, apps_answer)

    return run


async def interleaved(
    setup: Setup, n: int
) -> tuple[dict[str, Cost], list[float], list[float], dict[str, list[float]]]:
    """n ticks of each path, taken in turn, each after a pause: their CPU.

    Each round also times the parse after the same pause and again at once
    (the CPU of the same work cold and warm: what this machine charges for a
    pause at the time), and, each after another pause, the least a tick on
    each spawning path can cost: its two tool runs bare and the parse.
    """
    paths = setup.paths
    costs = {name: Cost() for name in paths}
    cold: list[float] = []
    warm: list[float] = []
    least: dict[str, list[float]] = {title: [] for title in setup.least}
    for node in paths.values():
        await node.take()  # warm up: imports, first host window, shard start times
    for _, timer in setup.driver.values():
        timer.reset()
    for _ in range(n):
        await anyio.sleep(PAUSE_S)
        started = time.process_time()
        setup.parse()
        between = time.process_time()
        setup.parse()
        cold.append(between - started)
        warm.append(time.process_time() - between)
        for title, bare in setup.least.items():
            await anyio.sleep(PAUSE_S)
            started = time.process_time()
            bare()
            least[title].append(time.process_time() - started)
        for name, node in paths.items():
            await anyio.sleep(PAUSE_S)
            own_before, children_before = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
            woken = wakes()
            telemetry = (await node.take()).sample
            woken = wakes() - woken
            own_after, children_after = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
            costs[name].add(
                (own_after[0] - own_before[0], own_after[1] - own_before[1]),
                (children_after[0] - children_before[0], children_after[1] - children_before[1]),
                woken,
            )
            judged = SHARDS if node.shards.shards_file else 0
            assert len(telemetry.gpus) == setup.gpus, telemetry.sources
            assert sum(len(g.processes) for g in telemetry.gpus) >= PROCESSES
            assert [b.verdict for b in telemetry.shards] == ["gpu"] * judged, telemetry.shards
    return costs, cold, warm, least


def fake_tool(tmp: Path, apps: str, python: str | None) -> str:
    where = tmp / ("interpreter" if python else "floor")
    where.mkdir()
    return str(write_fake_nvidia_smi(where, GPUS, apps, python=python) / "nvidia-smi")


def smi_chain(tool: str = NVIDIA_SMI) -> VendorChain:
    return VendorChain("nvidia", [NvidiaSmiSource(ProbeRunner(), tool=tool)])


def stand_in_answers(groups: list[list[int]]) -> tuple[str, str]:
    """nvidia-smi's two answers for GPUS GPUs, shard s's processes on GPU s % GPUS."""
    holders = [(s % GPUS, pid) for s, pids in enumerate(groups) for pid in pids]
    return query_gpu(GPUS), query_apps_of(holders)


def stand_in_gpus(groups: list[list[int]]) -> list[GpuSample]:
    """The GPUs those answers tell of, for the stand-in NVML library to serve."""
    gpu_answer, apps = stand_in_answers(groups)
    return attach_processes(parse_gpus(gpu_answer), parse_compute_apps(apps))


def fake_node(tmp: Path, groups: list[list[int]]) -> Setup:
    gpu_answer, apps = stand_in_answers(groups)
    shards = shards_file(tmp, groups, GPUS)
    gpus = stand_in_gpus(groups)
    floor_tool, interpreter_tool = fake_tool(tmp, apps, None), fake_tool(tmp, apps, sys.executable)
    floor, interpreter = "nvidia-smi, floor tool (sh+cat)", "nvidia-smi, interpreter tool"
    nvml, timed = "NVML in process", TimedNvml(FakeNvml(gpus))
    paths = {
        floor: sampler(smi_chain(floor_tool), shards),
        interpreter: sampler(smi_chain(interpreter_tool), shards),
        nvml: sampler(VendorChain("nvidia", [NvmlSource(FakeNvml(gpus))]), shards),
        TIMED: sampler(VendorChain("nvidia", [NvmlSource(timed)]), shards),
        "NVML in process, no shards": sampler(
            VendorChain("nvidia", [NvmlSource(FakeNvml(gpus))]), None
        ),
    }
    return Setup(
        f"{GPUS} GPUs (fake tools)",
        GPUS,
        paths,
        {"/ floor spawn": floor, "/ interp. spawn": interpreter},
        lambda: both_answers(gpu_answer, apps),
        {"/ floor spawn": bare_runs(floor_tool), "/ interp. spawn": bare_runs(interpreter_tool)},
        {nvml: (TIMED, timed)},
    )


def real_node(tmp: Path, groups: list[list[int]]) -> Setup:
    answers = [
        subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        for argv in (gpu_query_argv(), apps_query_argv())
    ]
    gpus = len(parse_gpus(answers[0]))
    assert gpus, f"nvidia-smi lists no GPU: {answers[0]!r}"
    shards = shards_file(tmp, groups, 1)
    smi, nvml = "nvidia-smi, the node's", "NVML, the node's driver"
    module, why_not = load_nvml()
    assert module is not None, why_not
    timed = TimedNvml(module)
    paths = {
        smi: sampler(smi_chain(), shards),
        nvml: sampler(VendorChain("nvidia", [NvmlSource(module)]), shards),
        TIMED: sampler(VendorChain("nvidia", [NvmlSource(timed)]), shards),
        "NVML, no shards": sampler(VendorChain("nvidia", [NvmlSource(module)]), None),
    }
    return Setup(
        f"{gpus} real GPU(s), every shard on GPU 0",
        gpus,
        paths,
        {"/ nvidia-smi spawn": smi},
        lambda: both_answers(*answers),
        {"/ nvidia-smi spawn": bare_runs(NVIDIA_SMI)},
        {nvml: (TIMED, timed)},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=150, help="ticks of each path")
    parser.add_argument(
        "--real", action="store_true", help="the node's own nvidia-smi and NVML, real GPU shards"
    )
    args = parser.parse_args()
    n = args.ticks
    processes = cuda_shard_processes if args.real else shard_processes
    with tempfile.TemporaryDirectory() as tmp_name, processes() as groups:
        setup = (real_node if args.real else fake_node)(Path(tmp_name), groups)
        costs, cold, warm, least = anyio.run(interleaved, setup, n, backend="asyncio")

    spawns = {title: costs[path].spawn for title, path in setup.spawns.items()}
    print(
        f"tick cost: {setup.what}, {PROCESSES} GPU processes, {SHARDS} shards, {n} ticks of each "
        f"path taken in turn, CPU ms per tick (load {os.getloadavg()[0]:.2f})"
    )
    print(
        f"{'path':<34}{'worker':>8}{'p50':>7}{'p90':>7}{'system':>8}{'wakes':>7}{'one spawn':>11}"
        + "".join(f"{title:>20}" for title in spawns)
    )
    for name, cost in costs.items():
        spawn = f"{cost.spawn * 1e3:.3f}" if cost.spawn else "-"
        print(
            f"{name:<34}{cost.mean * 1e3:>8.3f}{cost.quantile(0.5) * 1e3:>7.2f}"
            f"{cost.quantile(0.9) * 1e3:>7.2f}{cost.system_mean * 1e3:>8.3f}"
            f"{cost.wakes / len(cost.own):>7.1f}{spawn:>11}"
            + "".join(f"{cost.mean / each:>20.3f}" for each in spawns.values())
        )
    print(
        "worker: the mean; the ratios are of the mean. targets: nvidia-smi path worker <= 0.25 "
        f"of one spawn of its tool; NVML worker <= {NVML_TARGET_MS:g} ms per tick, and at most "
        f"the driver's own reads + {OVER_DRIVER_TARGET_MS:g} ms"
    )
    for name, (timed_path, timer) in setup.driver.items():
        reads = timer.reads_s / len(costs[timed_path].own)
        tick, most = costs[name].mean, reads + OVER_DRIVER_TARGET_MS / 1e3
        print(
            f"{name}: {tick * 1e3:.3f} ms a tick against the driver's own reads, "
            f"{reads * 1e3:.3f} ms in {timer.calls / len(costs[timed_path].own):.0f} NVML calls "
            f"(timed on the path beside it, less {timer.overhead_s * 1e6:.2f} us a call of "
            f"timing), + {OVER_DRIVER_TARGET_MS:g} ms = {most * 1e3:.3f} "
            f"ms: {tick / most:.2f} of it; the worker's part {(tick - reads) * 1e3:.3f} ms"
        )
        ticks = len(costs[timed_path].own)
        dearest = sorted(timer.by_call.items(), key=lambda kv: -kv[1])[:4]
        print(
            "  its dearest calls a tick: "
            + ", ".join(f"{call} {took / ticks * 1e3:.3f} ms" for call, took in dearest)
        )
    print(
        "the least a tick on the nvidia-smi path can cost: both queries run bare with "
        "subprocess.run and parsed, after the same pause (the mean):"
    )
    for title, each in spawns.items():
        bare = statistics.fmean(least[title])
        print(f"  {setup.spawns[title]:<32}{bare * 1e3:>8.3f} ms, {bare / each:.3f} of its spawn")
    cold_ms, warm_ms = statistics.median(cold) * 1e3, statistics.median(warm) * 1e3
    print(
        f"this machine after a pause: parsing both answers took {cold_ms:.3f} ms (median), "
        f"{warm_ms:.3f} ms again at once: {cold_ms / warm_ms:.1f}x"
    )


if __name__ == "__main__":
    main()
