"""A vendor's GPU read, waited for by a tick until the tick's deadline and no longer.

A GPU tool can take far longer than a tick may wait: nvidia-smi hung in the driver after an
Xid error runs until the probe timeout (5 s) kills it. A tick that waited for it published
nothing meanwhile, and consumers counted a live node silent. So each vendor's reads run in
a task of their own (`ChainReads.run`, in the sampler's task group): a tick asks for a read
and waits for it until its deadline (worker/deadline.py). A read is never cut short for
being late: it keeps its own limits (the probe timeout, and no new run of a tool stuck in
the driver: probe.py), and its answer, when it comes, is the next tick's, if no fresher one
came in time. A read under way is not asked for again. Only the first answer after the
worker starts is waited for whole (as long as the probe timeout): before it there is no GPU
to list, and every shard would read `unknown` at each start.

A tick without a reading of a vendor's GPUs (no answer by the deadline, or a tool that
failed) carries none of them, as a tool's outage does: no last value is repeated as if read
again. Its SourceStatus says why; the inventory keeps the GPUs as last read
(placewatch.schemas.lean.split), and the sampler marks the reading unread
(NodeReading.unread) where that vendor had GPUs, so that no shard is judged on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from placewatch.schemas import GpuSample, SourceStatus

from ..deadline import NEVER, Deadline
from . import ActivityWanted
from .registry import VendorChain

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """What one read of a vendor's GPUs gave."""

    gpus: list[GpuSample]
    statuses: list[SourceStatus]
    started: float
    """When the read began (the clock's time)."""

    @property
    def read(self) -> bool:
        """Whether it read the GPUs: it listed some, or a source answered (with none)."""
        return bool(self.gpus) or any(s.ok for s in self.statuses)


@dataclass(frozen=True)
class ChainReading:
    """What a tick has of one vendor's GPUs."""

    gpus: list[GpuSample]
    statuses: list[SourceStatus]
    started: float
    """When the read it took began; for a tick without one, when the tick asked."""
    unread: bool = False
    """The vendor had GPUs, and none of them was read this tick."""


class ChainReads:
    """The reads of one vendor's GPUs (its VendorChain), one at a time, in a task of their
    own while `run` runs, else awaited whole (`placewatch sample` waits for everything)."""

    def __init__(self, chain: VendorChain, clock: Callable[[], float] = time.monotonic) -> None:
        self.chain = chain
        self._clock = clock
        self._asks, self._asked = anyio.create_memory_object_stream[ActivityWanted](1)
        self._under_way: anyio.Event | None = None
        """Set when the read under way ends; None while none is."""
        self._answer: Answer | None = None
        """The last answer, until a tick takes it."""
        self._had_gpus = False
        """The last read that read the GPUs listed some."""
        self._read_at: float | None = None
        """When that read ended."""
        self._answered = False
        """A read ended, with GPUs or not."""
        self._running = False

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read whenever a tick asks, until cancelled."""
        self._running = True
        try:
            task_status.started()
            async for activity in self._asked:
                try:
                    self._answer = await self._read(activity)
                except Exception as exc:  # a defect in a source must not stop the worker
                    log.exception("reading the %s GPUs failed", self.chain.vendor)
                    self._answer = Answer([], [self._failed(exc)], self._clock())
                if self._under_way is not None:
                    self._under_way.set()
                self._under_way = None
        finally:
            self._running = False

    async def read(self, activity: ActivityWanted, deadline: Deadline = NEVER) -> ChainReading:
        """The GPUs as read by `deadline` (the first answer, by whenever it comes): by a read
        asked for now or one under way since an earlier tick, else by the answer that came
        after the last tick stopped waiting, else none, unread."""
        asked = self._clock()
        if not self._running or (self._under_way is None and self.chain.resting()):
            # Nothing to wait on: no task to read in, or a vendor with no tool (at once).
            self._answer = await self._read(activity)
        else:
            if self._under_way is None:
                self._under_way = anyio.Event()
                self._asks.send_nowait(activity)
            under_way = self._under_way
            # The first answer is waited for whole: before it there is no GPU to list, and
            # a shard judged without it would be `unknown` at every start.
            with (deadline if self._answered else NEVER).scope():
                await under_way.wait()
        answer, self._answer = self._answer, None
        if answer is not None and answer.read:
            return ChainReading(answer.gpus, answer.statuses, answer.started)
        statuses = answer.statuses if answer is not None else [self._late()]
        started = answer.started if answer is not None else asked
        return ChainReading([], statuses, started, unread=self._had_gpus)

    async def _read(self, activity: ActivityWanted) -> Answer:
        started = self._clock()
        gpus, statuses = await self.chain.sample(activity)
        answer = Answer(gpus, statuses, started)
        self._answered = True
        if answer.read:
            self._had_gpus, self._read_at = bool(gpus), self._clock()
        return answer

    def _name(self) -> str:
        """The source a read waits on: the one asked now, else the one in use."""
        chain = self.chain
        return chain.asking or (chain.current.name if chain.current else f"{chain.vendor} GPUs")

    def _failed(self, exc: Exception) -> SourceStatus:
        return SourceStatus(
            name=self._name(),
            ok=False,
            vendor=self.chain.vendor,
            error=f"placewatch could not read it ({type(exc).__name__}: {exc}); please report "
            "it with the output of `placewatch sample --json`",
        )

    def _late(self) -> SourceStatus:
        """The status of a source whose read did not end by the tick's deadline."""
        since = (
            "no answer since the worker started"
            if self._read_at is None
            else f"last answer {self._clock() - self._read_at:.1f} s ago"
        )
        return SourceStatus(
            name=self._name(),
            ok=False,
            vendor=self.chain.vendor,
            error=f"no answer within the tick's deadline; {since}: its GPUs are not read this "
            "tick (a tool that keeps hanging may be stuck in the driver: check dmesg for Xid "
            "errors)",
        )
