"""Compute evidence beyond memory: does a shard's engine do anything on its GPUs while it
serves?

Memory held is not compute done: llama.cpp with 0 of 29 layers offloaded holds a 1.4 GiB
CUDA compute buffer and computes on the CPU, and at its default verbosity (since about
b9181) it says nothing of where its layers went. Two readings settle it without the
engine's word: the GPU tools' per-process activity (GpuProcess.sm_pct, .mem_pct) and the
requests the engine's own log shows running (engines/evidence/serving.py). A shard that ran
requests while every read of its GPUs meanwhile showed its processes doing nothing there
computes elsewhere.

The reads are matched to the requests in time, so that a burst between two reads proves
nothing either way: a read counts when a request had been running for at least SETTLE_S
before it (NVML's and pmon's samples cover the last 1/6 s to 1 s) and was still running
when it was taken (a finished request's end is when its line was read, up to LOG_LAG_S
late). MIN_IDLE_READS such reads, every one showing 0% SM and no memory-controller use on
every GPU the shard was placed on, say it computes on the CPU. A read without a value (a
tool that does not give per-process activity, an AMD GPU: see gpu/amd_smi/activity.py) says
nothing, so it changes no verdict. Once seen, the finding holds while the same process
runs and its GPUs show it nothing: an engine between requests does not turn back into
one that computes on its GPUs; a read showing any activity there ends it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from placewatch.schemas import ACTIVITY_WINDOW_S, GpuSample

if TYPE_CHECKING:  # its patterns are compiled with the first log followed (follow.py)
    from ..engines.evidence.serving import Request, Serving

SETTLE_S = 1.0
LOG_LAG_S = 0.5
MIN_IDLE_READS = 2

PerGpu = dict[int, float | None]
"""GPU index -> a percentage summed over a shard's processes there (None: not given)."""


@dataclass(frozen=True, slots=True)
class Read:
    """What a shard's processes ran on each GPU, as one GPU read saw it."""

    at: float
    sm: PerGpu
    mem: PerGpu


@dataclass(frozen=True, slots=True)
class IdleServing:
    """A shard that served while its processes did nothing on its GPUs."""

    engine: str | None
    requests: int
    busy_s: float | None
    """The requests' time by the engine's own timing, where it gives one."""
    reads: int
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Activity:
    """What the window says of one shard."""

    sm_pct: int | None = None
    """Its busiest GPU's SM use by its processes, the mean over the window's reads, in whole
    percent."""
    requests: int | None = None
    """Requests its engine ran in the window; None when its log shows none at all."""
    idle_serving: IdleServing | None = None


def shard_usage(gpus: list[GpuSample]) -> dict[str, tuple[PerGpu, PerGpu]]:
    """Shard id -> (SM %, memory %) per GPU, summed over its processes (each GpuProcess's
    `shard`); one process without a value leaves the GPU's sum without one. Sums past 100
    (processes that overlap in time) are capped where they are read. Runs every tick over
    every GPU process: written flat."""
    found: dict[str, tuple[PerGpu, PerGpu]] = {}
    for gpu in gpus:
        index = gpu.index
        for p in gpu.processes:
            if p.shard is None:
                continue
            pair = found.get(p.shard)
            if pair is None:
                pair = found[p.shard] = ({}, {})
            sm, mem = pair
            before = sm.get(index, 0.0)
            sm[index] = None if before is None or p.sm_pct is None else before + p.sm_pct
            before = mem.get(index, 0.0)
            mem[index] = None if before is None or p.mem_pct is None else before + p.mem_pct
    return found


class _Window:
    """One shard's reads in the window, with what every tick asks of them kept up to date
    as reads come and go: a tick costs the same however many reads the window holds (an
    interval of 0.1 s puts 300 in it)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.reads: deque[Read] = deque()
        self.sums: dict[int, tuple[float, int]] = {}
        """GPU index -> (sum, count) of the SM values the window's reads give."""
        self.last_busy = float("-inf")
        """When a read last showed the shard's processes running on a placed GPU."""
        self.held: IdleServing | None = None

    def add(self, read: Read, placed: set[int]) -> None:
        self.reads.append(read)
        self._count(read, 1)
        if any((read.sm.get(i) or 0) > 0 for i in placed):
            self.last_busy = read.at

    def trim(self, since: float) -> None:
        while self.reads and self.reads[0].at < since:
            self._count(self.reads.popleft(), -1)

    def _count(self, read: Read, sign: int) -> None:
        for index, value in read.sm.items():
            if value is not None:
                total, n = self.sums.get(index, (0.0, 0))
                self.sums[index] = (total + sign * value, n + sign)

    def busiest(self) -> int | None:
        """The highest, over GPUs, of the mean SM use over the reads that give one."""
        means = [max(total, 0.0) / n for total, n in self.sums.values() if n > 0]
        return min(round(max(means)), 100) if means else None


class ActivityWindows:
    """The last ACTIVITY_WINDOW_S of reads of every shard, and what they found."""

    def __init__(self, window_s: float = ACTIVITY_WINDOW_S) -> None:
        self.window_s = window_s
        self._windows: dict[str, _Window] = {}

    def forget(self, keep: set[str]) -> None:
        """Drop every shard but those in `keep`."""
        for sid in [s for s in self._windows if s not in keep]:
            del self._windows[sid]

    def observe(
        self,
        sid: str,
        *,
        pid: int | None,
        read: Read | None,
        serving: Serving | None,
        placed: set[int],
        now: float,
    ) -> Activity:
        """Add this tick's `read` of the shard (None: no GPU tool answered), and say what the
        window holds; `now` is time.monotonic() as the serving times are."""
        window = self._windows.get(sid)
        if window is None or window.pid != pid:  # another process: start afresh
            window = self._windows[sid] = _Window(pid)
        if read is not None:
            window.add(read, placed)
        since = now - self.window_s
        window.trim(since)
        requests = serving.since(since) if serving is not None else []
        if window.last_busy >= since:
            window.held = None
        elif placed and requests:
            engine = serving.engine if serving is not None else None
            window.held = _idle_serving(window.reads, requests, placed, engine) or window.held
        return Activity(
            sm_pct=window.busiest(),
            requests=len(requests) if serving is not None and serving.seen else None,
            idle_serving=window.held,
        )


def _idle(read: Read, placed: set[int]) -> bool | None:
    """True: nothing ran on any placed GPU; None: a placed GPU has no value."""
    if any(read.sm.get(i) is None for i in placed):
        return None
    return all(read.sm.get(i) == 0 and not read.mem.get(i) for i in placed)


def _covered(read: Read, requests: list[Request]) -> bool:
    """Whether a request was running through the last SETTLE_S before the read."""
    return any(
        q.started <= read.at - SETTLE_S and (q.ended is None or q.ended - LOG_LAG_S >= read.at)
        for q in requests
    )


def _idle_serving(
    reads: Iterable[Read], requests: list[Request], placed: set[int], engine: str | None
) -> IdleServing | None:
    covered = [r for r in reads if _covered(r, requests)]
    idle = [_idle(r, placed) for r in covered]
    if len(covered) < MIN_IDLE_READS or not all(i is True for i in idle):
        return None
    timed = [q.busy_s for q in requests if q.busy_s is not None]
    return IdleServing(
        engine=engine,
        requests=len(requests),
        busy_s=sum(timed) if timed else None,
        reads=len(covered),
        gpus=tuple(sorted(placed)),
    )
