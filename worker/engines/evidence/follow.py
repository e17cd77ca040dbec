"""Every shard's engine log, followed by one task; its evidence handed to the tick as values.

One task owns the tails and their readers, and nothing else touches them:
the file reads run in a worker thread that this task awaits, so no two
threads ever share one. The tick asks for the evidence of the logs it wants
(`read`) and gets immutable EngineEvidence back; between ticks the task looks
at the logs LOG_POLL_S apart and says when one changed (`changed`), so that
an engine's own word reaches the bus well inside an interval. With no log to
follow it sleeps until a tick asks for one: an idle worker has no wake-ups
here (polling five times a second cost a tenth of an idle worker's CPU,
docs/benchmarks.md).

Reading has a budget. A log is read a chunk at a time, the logs in turns, until each has
read what it had, MOST_BYTES, or the time is up: the tick's deadline for its ask, POLL_SLICE_S
for a look between ticks. A log of keyword lines takes a core a second per 3 MiB or so to
parse, and one may grow at 80 MB/s: what is left is read on at the next look, and the
evidence says how far behind it is (`behind_bytes`). The tick waits for the answer no longer
than its deadline, or, where that had passed when it asked, than one look between ticks.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ...deadline import NEVER, Deadline
from .journal import Journal, JournalTail
from .source import JournalLog, LogSource
from .state import WRITES_DELETED, EngineEvidence
from .tail import CHUNK, LogTail
from .unwrap import Unwrap

if TYPE_CHECKING:
    from .read import EvidenceReader
    from .serving import Serving, ServingLog

LOG_POLL_S = 0.2
POLL_SLICE_S = 0.05
"""The most a look between ticks reads for: a quarter of a core while a log floods."""
MOST_BYTES = 16 << 20
"""The most one log is read of in one look or one tick."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""The ticks a second of a process's start time in /proc/PID/stat."""
ANSWER_S = 0.05
"""What an answer is given of its deadline to be built and sent back to the tick."""
FIRST_BYTES = 256 << 10
"""What a log first followed is read of whatever the tick's deadline: a llama-server b11434
start is 12 KB at `-lv 4`, 75 KB at `-lv 5` (tests/fixtures/engine-logs/real-b11434), and
keyword lines parse at some 3 MB a second, so at most about 90 ms once a log."""
FIRST_S = 0.5
"""What an ask naming a log not followed before waits past its deadline for that first read:
90 ms on an idle core, five times that on a loaded one."""

Evidence = Mapping[str, EngineEvidence]
"""Shard id -> what its engine's log says so far."""
Requests: TypeAlias = "Mapping[str, Serving]"
"""Shard id -> the requests its engine's log showed."""


def _reader() -> EvidenceReader:
    """A reader for one log. The readers' module is imported with the first log followed:
    its patterns take as long to compile as the rest of a node without logs to import."""
    from .read import EvidenceReader  # noqa: PLC0415

    return EvidenceReader()


def _tail(source: LogSource, journal: Journal) -> LogTail | JournalTail:
    """A tail that reads a large log from its newest life (lives.py, whose patterns are
    compiled with the first log followed); a unit's entries from `journal`."""
    if isinstance(source, JournalLog):
        return JournalTail(source, journal)
    from .lives import newest_life  # noqa: PLC0415

    return LogTail(source, start=newest_life)


def _serving() -> ServingLog:
    """The requests of one log, its patterns compiled with the first log followed too."""
    from .serving import ServingLog  # noqa: PLC0415

    return ServingLog()


@dataclass
class _Followed:
    tail: LogTail | JournalTail
    reader: EvidenceReader = field(default_factory=_reader)
    serving: ServingLog = field(default_factory=_serving)
    prefix: str | None = None
    """Only lines starting with this are the shard's (a router's child's `[PORT]`)."""
    unwrap: Unwrap = field(default_factory=Unwrap)
    generation: int = 0
    history_end: int | None = None
    """The log's size when it was first looked at: what it held then is history (serving.py);
    -1 once another file took its place."""
    read_bytes: int = 0
    """What the pass under way read of it."""
    pid: int | None = None
    """The process that writes the log, as the tick last said."""
    starts: int = 0
    """The startup banners read by the last answer to the tick."""
    banner_at: float | None = None
    """When the newest startup banner was read, in seconds since boot (CLOCK_BOOTTIME, the
    clock of a process's start in /proc/PID/stat)."""
    stale_since: datetime | None = None
    """When the log was truncated, rotated or removed under the process that writes it."""
    _rotated: EngineEvidence | None = None
    """The evidence then: once the engine says more, it is fresh again."""

    def _own(self, lines: list[str]) -> list[str]:
        """The shard's lines: with a prefix, those that carry it, without it."""
        if self.prefix is None:
            return lines
        cut = len(self.prefix)
        return [x[cut:].removeprefix(" ") for x in lines if x.startswith(self.prefix)]

    def writer(self, pid: int | None, started: int | None = None) -> None:
        """The process writing the log now, as the tick found it, and when it `started`
        (clock ticks since boot, /proc/PID/stat; None: not told). One that replaced the last
        one before its startup banner was read starts a new life from here (lives.py): what
        was read so far is the last process's. A banner read since it started is its own,
        though read before the tick named it (through the last process's descriptor, while
        that one still held the file: a server stopped as the next one starts into its log).
        None where the engine's processes do not own its log (Engine.owns_log: Ollama's
        runners)."""
        if pid is None:
            return
        if self.pid is not None and pid != self.pid:
            if not self._banner_since(started):
                self.reader.new_life()
            self.stale_since = None  # the last one's descriptor closed as it exited
        self.pid = pid

    def _banner_since(self, started: int | None) -> bool:
        """Whether a startup banner was read since a process started `started`; where that is
        not told, since the last answer to the tick. The start is in whole ticks, early by less
        than one (10 ms), so a banner read once the process runs always counts. (psutil's
        create_time would not do: its boot time is whole seconds, up to one early, and a
        restart within that second would keep the last process's lines.)"""
        if started is None:
            return self.reader.lives.starts != self.starts
        return self.banner_at is not None and self.banner_at >= started / CLOCK_TICKS

    def answer(self) -> EngineEvidence:
        self.starts = self.reader.lives.starts
        said = self.reader.snapshot()
        behind, unread = self.tail.behind or None, self.tail.refused
        deleted = self.tail.path if isinstance(self.tail, LogTail) and self.tail.deleted else None
        if deleted is not None and self.stale_since is None:  # nothing it said to hold
            unread = f"{deleted} {WRITES_DELETED}"
        if self.stale_since is None and behind is None and unread is None:
            return said
        return replace(
            said,
            stale_since=self.stale_since,
            behind_bytes=behind,
            unread=unread,
            deleted=deleted,
        )

    def begin(self) -> EngineEvidence:
        """What it says before a pass reads more."""
        self.read_bytes = 0
        return self.reader.snapshot()

    @property
    def more(self) -> bool:
        """Its log holds more than was read, and this pass may read more of it."""
        return self.tail.behind > 0 and self.read_bytes < MOST_BYTES

    def step(self, stop_at: float) -> None:
        """Read one chunk of what the log added (a journal's, within `stop_at`). Blocking."""
        before = self.reader.snapshot()
        lines = self.tail.poll(CHUNK, stop_at)
        if self.tail.generation != self.generation:
            # Truncated, rotated or removed: what the process said stands, stale, until it
            # says more; a restart says its banner (or the tick a new pid) and starts afresh.
            self.generation, self.history_end = self.tail.generation, -1
            self.serving, self.unwrap = _serving(), Unwrap()
            self.reader.lives.new_file()
            if before.known and self.stale_since is None:
                self.stale_since, self._rotated = datetime.now(UTC), before
        if self.history_end is None:
            self.history_end = self.tail.offset + self.tail.behind
        self.read_bytes += self.tail.last_read
        at, history = time.monotonic(), self.tail.offset <= self.history_end
        starts = self.reader.lives.starts
        for wrapped in lines:
            for line in self._own(self.unwrap.lines(wrapped)):
                self.reader.read(line)
                self.serving.read(line, at, history)
        if self.reader.lives.starts != starts:
            self.banner_at = time.clock_gettime(time.CLOCK_BOOTTIME)

    def end(self, before: EngineEvidence) -> bool:
        """True when its evidence changed since `before` (the requests it runs are no news
        worth a tick of their own)."""
        now = self.reader.snapshot()
        if self.stale_since is not None and now != self._rotated:
            self.stale_since = None
        return now != before


class Log(NamedTuple):
    """A shard's log: which file it is and how it is opened (source.py), the pid of the
    process that writes it (None: not told), the prefix its own lines carry where others
    write there too (a router's children), and when that process started (clock ticks since
    boot, as /proc/PID/stat says; None: not told)."""

    source: LogSource
    pid: int | None = None
    prefix: str | None = None
    started: int | None = None


Wanted = Mapping[str, Log]
"""Shard id -> its log."""


@dataclass(frozen=True)
class _Ask:
    wanted: Wanted
    reply: MemoryObjectSendStream[Evidence]
    deadline: Deadline


class EngineLogs:
    """The owner of every engine log tail; run `run` in a task group with `start`."""

    def __init__(
        self,
        poll_s: float = LOG_POLL_S,
        slice_s: float = POLL_SLICE_S,
        journal: Journal | None = None,
    ) -> None:
        self.poll_s = poll_s
        self.slice_s = slice_s
        self.journal = Journal.at() if journal is None else journal
        """Where a unit's entries are read (journal/): the node's journal unless told."""
        self._asks: MemoryObjectSendStream[_Ask] | None = None
        self._said: Evidence = {}
        """The last answer given: what a tick whose deadline came first gets."""
        self._turn = 0
        changes_send, self._changes = anyio.create_memory_object_stream[None](1)
        self._changes_send = changes_send
        self.serving: Requests = {}
        """The requests each followed log showed, as of the last `read` (set with its
        answer, on the event loop)."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        asks_send, asks = anyio.create_memory_object_stream[_Ask]()
        followed: dict[str, _Followed] = {}
        with asks_send, asks:
            self._asks = asks_send
            task_status.started()
            while True:
                ask = await self._next_ask(asks, bool(followed))
                if ask is not None:
                    _follow(followed, ask.wanted, self.journal)
                    stop_at = ask.deadline.at - ANSWER_S
                else:
                    stop_at = time.monotonic() + self.slice_s
                self._turn += 1
                changed = bool(followed) and await anyio.to_thread.run_sync(
                    _read_all, list(followed.values()), stop_at, self._turn
                )
                if ask is not None:
                    with ask.reply:
                        evidence = {sid: f.answer() for sid, f in followed.items()}
                        self.serving = {sid: f.serving.snapshot() for sid, f in followed.items()}
                        self._said = evidence
                        with contextlib.suppress(anyio.BrokenResourceError):  # asker gave up
                            ask.reply.send_nowait(evidence)
                elif changed:
                    with contextlib.suppress(anyio.WouldBlock):  # one is waiting to be told
                        self._changes_send.send_nowait(None)

    async def _next_ask(
        self, asks: MemoryObjectReceiveStream[_Ask], following: bool
    ) -> _Ask | None:
        """The next ask; with logs to follow, None once it is time to look at them again."""
        if not following:
            return await asks.receive()
        with anyio.move_on_after(self.poll_s):
            return await asks.receive()
        return None

    async def read(self, wanted: Wanted, *, deadline: Deadline = NEVER) -> Evidence:
        """Follow exactly the logs `wanted` names and give their evidence, read up to now or
        up to `deadline`. An ask past its deadline is answered with what was read by then,
        at once, and still sets what is followed (a tick whose GPU tools took its whole input
        share must not leave its logs unfollowed); one not answered within a look between
        ticks past it (and FIRST_S more where it names a log not followed before) gets the
        last answer (the logs are read on meanwhile)."""
        if self._asks is None:
            raise RuntimeError("EngineLogs.read before its task started")
        reply_send, reply = anyio.create_memory_object_stream[Evidence](1)
        first = FIRST_S if not wanted.keys() <= self._said.keys() else 0.0
        with reply, anyio.move_on_after(deadline.left() + self.slice_s + ANSWER_S + first):
            await self._asks.send(_Ask(wanted, reply_send, deadline))
            return await reply.receive()
        return {sid: said for sid, said in self._said.items() if sid in wanted}

    async def changed(self) -> None:
        """Until a followed log says something new (since the last time this returned)."""
        await self._changes.receive()


def _follow(followed: dict[str, _Followed], wanted: Wanted, journal: Journal) -> None:
    for sid in [s for s in followed if s not in wanted]:
        del followed[sid]
    for sid, (source, pid, prefix, started) in wanted.items():
        current = followed.get(sid)
        if current is None or current.tail.path != source.path or current.prefix != prefix:
            current = followed[sid] = _Followed(_tail(source, journal), prefix=prefix)
        elif isinstance(current.tail, JournalTail) and isinstance(source, JournalLog):
            current.tail.source = source  # the same unit, its process as the tick found it
        elif isinstance(current.tail, LogTail) and not isinstance(source, JournalLog):
            current.tail.source = source  # the same file, its process as the tick found it
        current.writer(pid, started)


def _read_all(followed: list[_Followed], stop_at: float, turn: int) -> bool:
    """Read the logs a chunk at a time, in turns (this pass's first is the `turn`th), until
    each read what it had or MOST_BYTES, or until `stop_at` (time.monotonic()); True when
    the evidence of one changed. A log never looked at is read up to FIRST_BYTES whatever
    the time: an engine's log is mostly no longer when it is first followed, and a status
    judged without it would say what the log then contradicts. Blocking."""
    first = turn % len(followed) if followed else 0
    pending = followed[first:] + followed[:first]
    before = [(f, f.begin()) for f in pending]
    for f in pending:
        if f.history_end is None:
            f.step(stop_at)
            while f.more and f.read_bytes < FIRST_BYTES:
                f.step(stop_at)
    while pending:
        for f in pending:
            if time.monotonic() >= stop_at:
                return _ended(before)
            f.step(stop_at)
        pending = [f for f in pending if f.more]
    return _ended(before)


def _ended(before: list[tuple[_Followed, EngineEvidence]]) -> bool:
    changed = False
    for f, said in before:
        changed = f.end(said) or changed
    return changed
