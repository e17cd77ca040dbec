"""A tool that loops by itself, kept running as one child whose lines are read as they come.

Spawning a GPU tool costs more CPU than the rest of a tick (docs/benchmarks.md): nvidia-smi
loads the driver's library and opens every GPU each time it starts. A tool that can repeat
its query on a timer of its own (`nvidia-smi --query-gpu=... --loop-ms=N`) is started once;
its stdout is read on the event loop whenever the pipe has data (no thread, no task per line)
and every complete line goes to a `LineSink`, which tells a complete reading from a partial
one.

The child runs as a probe does (probe.py): no shell, a session of its own, its whole group
killed when it ends, a child that survives SIGKILL left with the runner, which starts no
other run of that tool, looping or not, while it lives. A child ends when:

- it prints no line for HANG_INTERVALS intervals (its first line may take the probe timeout:
  a driver without persistence mode takes seconds to open its GPUs): it is taken to be hung
  (an Xid error can leave nvidia-smi blocked in the driver), killed with its group and
  started again; the loop is `degraded` until a new child gives a complete reading;
- it exits: it is started again after RESTART_FIRST_S, a pause that doubles, up to
  RESTART_MOST_S, while children keep failing before a complete reading. What it printed on
  stderr is kept: one whose complaint `refuses` recognises (an old driver that does not know
  a field or the loop option) is not started again, and `refused` says why;
- nothing has asked for its readings for IDLE_INTERVALS intervals (its source is no longer
  the one the worker reads): it is stopped until asked again.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio
from anyio.abc import TaskStatus

from .probe import Child, ProbeRunner, Watched, has_exited, read_left, read_ready

log = logging.getLogger(__name__)

HANG_INTERVALS = 2
"""A child that prints no line for this many intervals is hung."""
IDLE_INTERVALS = 10
"""A child whose readings no one asked for in this many intervals is stopped."""
RESTART_FIRST_S, RESTART_MOST_S = 1.0, 60.0
"""The pauses before a child that exited is started again: the first, and the longest."""
STDERR_KEPT = 4096
"""The last bytes of a child's stderr that are kept, for the reason it gives when it exits."""
NO_PIDFD_POLL_S = 0.5
"""Without a pidfd (Linux before 5.3), how often a child's exit is looked for."""


class LineSink(Protocol):
    """Where a looping child's output goes, line by line, on the event loop."""

    def started(self) -> None:
        """A new child: what the last one left half-printed is void."""

    def line(self, text: str) -> bool:
        """One line the child printed (without its end); True when it completed a reading."""
        ...


End = Literal["exited", "hung", "idle", "not started"]


@dataclass(frozen=True)
class _Ended:
    how: End
    detail: str = ""


class ToolLoop:
    """One looping child of a tool, restarted as the module says; `run` is its task."""

    def __init__(
        self,
        runner: ProbeRunner,
        argv: Sequence[str],
        interval_s: float,
        sink: LineSink,
        *,
        refuses: Callable[[str], bool] = lambda _: False,
        restart_s: tuple[float, float] = (RESTART_FIRST_S, RESTART_MOST_S),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.argv = list(argv)
        self.tool = os.path.basename(self.argv[0])
        self.interval_s = interval_s
        self.sink = sink
        self.hangs = 0
        """Children killed for printing nothing for HANG_INTERVALS intervals."""
        self.trouble: str | None = None
        """What went wrong with the last child and what to do, until a child gives a reading."""
        self.degraded = False
        """The last child hung, or one is stuck in the driver; until a child gives a reading."""
        self.refused: str | None = None
        """What the tool said when it refused the command line: it is not started again."""
        self.pid: int | None = None
        """The running child's pid."""
        self._runner = runner
        self._refuses = refuses
        self._restart_first_s, self._restart_most_s = restart_s
        self._clock = clock
        self._asked_at = -float("inf")
        self._asked: anyio.Event | None = None
        self._started = False

    @property
    def running(self) -> bool:
        """Whether `run` is running: without it, nothing reads the tool this way."""
        return self._started and self.refused is None

    def want(self) -> None:
        """A reading was wanted now: the child is kept running, or started."""
        self._asked_at = self._clock()
        if self._asked is not None:
            self._asked.set()

    def _idle(self) -> bool:
        return self._clock() - self._asked_at > IDLE_INTERVALS * self.interval_s

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep a child running while its readings are wanted, until the tool refuses."""
        self._started = True
        task_status.started()
        failures = 0
        while self.refused is None:
            while self._idle():
                self._asked = anyio.Event()
                await self._asked.wait()
            stuck = self._runner.stuck(self.tool)
            if stuck is not None:
                self.degraded = True
                self.trouble = (
                    f"{self.tool} (pid {stuck}) is stuck in the driver and survived SIGKILL; "
                    "not starting another until it exits (check dmesg for Xid errors)"
                )
                await anyio.sleep(self.interval_s)
                continue
            try:
                ended, healthy = await self._one_child()
            except Exception:  # a defect here must not stop the worker: the tick reads once
                log.exception("reading %s failed", " ".join(self.argv))
                ended, healthy = _Ended("not started", "failed (see the worker's log)"), False
            if ended.how == "idle":
                continue
            failures = 1 if healthy else failures + 1
            pause = self._after(ended, failures)
            if self.refused is None:
                await anyio.sleep(pause)

    def _after(self, ended: _Ended, failures: int) -> float:
        """Say what ended the child; the pause before the next one. `failures`: children in a
        row, this one included, that ended before giving a reading (or after their first)."""
        pause = min(self._restart_first_s * 2.0 ** (failures - 1), self._restart_most_s)
        if ended.how == "hung":
            self.hangs += 1
            self.degraded = True
            pause = 0.0 if failures == 1 else pause
            self.trouble = (
                f"{self.tool} printed nothing for {ended.detail} and was killed with its "
                f"process group ({self.hangs} so far); started again in {pause:g} s. If it "
                f"keeps hanging, check dmesg for Xid errors and whether `{self.tool}` answers "
                "when run by hand"
            )
        elif ended.how == "exited" and self._refuses(ended.detail):
            self.refused = ended.detail
            log.info("%s refused %s: %s", self.tool, " ".join(self.argv[1:]), ended.detail)
            return 0.0
        elif ended.how == "exited":
            self.trouble = (
                f"{self.tool} {ended.detail}; starting it again in {pause:g} s "
                f"(run `{' '.join(self.argv)}` by hand to see why)"
            )
        else:
            self.trouble = f"{ended.detail}; trying again in {pause:g} s"
        log.warning("%s", self.trouble)
        return pause

    async def _one_child(self) -> tuple[_Ended, bool]:
        """Start a child and read it until it ends; whether it gave a complete reading."""
        path = shutil.which(self.argv[0])
        if path is None:
            return _Ended("not started", f"{self.argv[0]} not found on PATH"), False
        child = self._runner.start(self.tool, [path, *self.argv[1:]])
        if isinstance(child, str):
            return _Ended("not started", child), False
        self.pid = child.proc.pid
        self.sink.started()
        ended = _Ended("hung")
        read = _Reader(self, child)
        try:
            ended = await read.until_end()
            if ended.how == "exited":
                await read_left(child.pipes)
                read.lines()
        finally:
            await self._runner.end(self.tool, child, ended.how == "exited")
            self.pid = None
        if ended.how == "exited":
            ended = _Ended("exited", _exit_detail(child, read.last))
        return ended, read.healthy


class _Reader:
    """One child's pipes, read until it exits, hangs or is no longer wanted."""

    def __init__(self, loop: ToolLoop, child: Child) -> None:
        self.loop = loop
        self.child = child
        self.healthy = False
        """Whether this child completed a reading."""
        self.last = ""
        """The last line it printed: why it exited, where it said nothing on stderr."""

    def lines(self) -> bool:
        """Hand every complete line on stdout to the sink; whether there was one."""
        out = self.child.out
        end = out.rfind(b"\n")
        if end < 0:
            return False
        text = out[: end + 1].decode(errors="replace")
        del out[: end + 1]
        for line in text.splitlines():
            self.last = line.strip() or self.last
            try:
                complete = self.loop.sink.line(line)
            except Exception:  # a defect in a parser passes the line over, nothing more
                log.exception("%s printed a line that could not be read: %r", self.loop.tool, line)
                continue
            if complete:
                self.healthy = True
                self.loop.trouble, self.loop.degraded = None, False
        return True

    async def until_end(self) -> _Ended:
        loop, child = self.loop, self.child
        hang_s = HANG_INTERVALS * loop.interval_s
        # The first line waits out the probe timeout: nvidia-smi opens every GPU first.
        deadline = loop._clock() + max(hang_s, loop._runner.timeout_s)
        exit_fd = [] if child.pidfd is None else [child.pidfd]
        with Watched([*child.pipes, *exit_fd]) as watched:
            while True:
                read_ready(child.pipes)
                watched.keep([*child.pipes, *exit_fd])  # a pipe at its end is read no more
                del child.err[:-STDERR_KEPT]
                if self.lines():
                    deadline = loop._clock() + hang_s
                if child.pidfd is None and has_exited(child.proc.pid):
                    return _Ended("exited")
                if loop._idle():
                    return _Ended("idle")
                left = deadline - loop._clock()
                if left <= 0:
                    return _Ended("hung", f"{hang_s:g} s")
                wait = min(left, IDLE_INTERVALS * loop.interval_s)
                if child.pidfd is None:
                    wait = min(wait, NO_PIDFD_POLL_S)
                woken: set[int] = set()
                with anyio.move_on_after(wait):
                    woken = await watched.wait()
                if child.pidfd is not None and child.pidfd in woken:
                    return _Ended("exited")


def _exit_detail(child: Child, last: str) -> str:
    """How the child ended, with the first line it said on stderr, else the last on stdout."""
    said = child.err.decode(errors="replace").strip().splitlines() or ([last] if last else [])
    code = child.proc.returncode
    how = (
        f"exited {code}"
        if code is not None and code >= 0
        else f"was killed by signal {-(code or 0)}"
    )
    return f"{how}: {said[0]}" if said else f"{how} without a word"
