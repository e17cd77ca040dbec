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
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .state import EngineEvidence
from .tail import LogTail
from .unwrap import Unwrap

if TYPE_CHECKING:
    from .read import EvidenceReader
    from .serving import Serving, ServingLog

LOG_POLL_S = 0.2

Evidence = Mapping[str, EngineEvidence]
"""Shard id -> what its engine's log says so far."""
Requests: TypeAlias = "Mapping[str, Serving]"
"""Shard id -> the requests its engine's log showed."""


def _reader() -> EvidenceReader:
    """A reader for one log. The readers' module is imported with the first log followed:
    its patterns take as long to compile as the rest of a node without logs to import."""
    from .read import EvidenceReader  # noqa: PLC0415

    return EvidenceReader()


def _serving() -> ServingLog:
    """The requests of one log, its patterns compiled with the first log followed too."""
    from .serving import ServingLog  # noqa: PLC0415

    return ServingLog()


@dataclass
class _Followed:
    tail: LogTail
    reader: EvidenceReader = field(default_factory=_reader)
    serving: ServingLog = field(default_factory=_serving)
    prefix: str | None = None
    """Only lines starting with this are the shard's (a router's child's `[PORT]`)."""
    unwrap: Unwrap = field(default_factory=Unwrap)
    generation: int = 0
    polled: bool = False
    """The log was read once: what it held then is history (serving.py)."""
    pid: int | None = None
    """The process that writes the log, as the tick last said."""
    starts: int = 0
    """The startup banners read by the last answer to the tick."""
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

    def writer(self, pid: int | None) -> None:
        """The process writing the log now, as the tick found it. One that replaced the last
        one before its startup banner was read starts a new life from here (lives.py): what
        was read so far is the last process's. None where the engine's processes do not own
        its log (Engine.owns_log: Ollama's runners)."""
        if pid is None:
            return
        if self.pid is not None and pid != self.pid and self.reader.lives.starts == self.starts:
            self.reader.new_life()
            self.stale_since = None
        self.pid = pid

    def answer(self) -> EngineEvidence:
        self.starts = self.reader.lives.starts
        said = self.reader.snapshot()
        return said if self.stale_since is None else replace(said, stale_since=self.stale_since)

    def update(self) -> bool:
        """Read what the log added; True when its evidence changed (the requests it runs are
        no news worth a tick of their own). Blocking."""
        before = self.reader.snapshot()
        lines = self.tail.poll()
        if self.tail.generation != self.generation:
            # Truncated, rotated or removed: what the process said stands, stale, until it
            # says more; a restart says its banner (or the tick a new pid) and starts afresh.
            self.generation = self.tail.generation
            self.serving, self.unwrap = _serving(), Unwrap()
            self.reader.lives.new_file()
            if before.known and self.stale_since is None:
                self.stale_since, self._rotated = datetime.now(UTC), before
        at, history, self.polled = time.monotonic(), not self.polled, True
        for wrapped in lines:
            for line in self._own(self.unwrap.lines(wrapped)):
                self.reader.read(line)
                self.serving.read(line, at, history)
        now = self.reader.snapshot()
        if self.stale_since is not None and now != self._rotated:
            self.stale_since = None
        return now != before


class Log(NamedTuple):
    """A shard's log: its path, the pid of the process that writes it (None: not told), and
    the prefix its own lines carry where others write there too (a router's children)."""

    path: str
    pid: int | None = None
    prefix: str | None = None


Wanted = Mapping[str, "Log | tuple[str, int | None]"]
"""Shard id -> its log."""


@dataclass(frozen=True)
class _Ask:
    wanted: dict[str, Log]
    reply: MemoryObjectSendStream[Evidence]


class EngineLogs:
    """The owner of every engine log tail; run `run` in a task group with `start`."""

    def __init__(self, poll_s: float = LOG_POLL_S) -> None:
        self.poll_s = poll_s
        self._asks: MemoryObjectSendStream[_Ask] | None = None
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
                    _follow(followed, ask.wanted)
                changed = bool(followed) and await anyio.to_thread.run_sync(_update_all, followed)
                if ask is not None:
                    with ask.reply:
                        evidence = {sid: f.answer() for sid, f in followed.items()}
                        self.serving = {sid: f.serving.snapshot() for sid, f in followed.items()}
                        with contextlib.suppress(anyio.BrokenResourceError):  # asker cancelled
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

    async def read(self, wanted: Wanted) -> Evidence:
        """Follow exactly the logs `wanted` names and give their evidence, read up to now."""
        if self._asks is None:
            raise RuntimeError("EngineLogs.read before its task started")
        reply_send, reply = anyio.create_memory_object_stream[Evidence](1)
        with reply:
            await self._asks.send(_Ask({s: Log(*w) for s, w in wanted.items()}, reply_send))
            return await reply.receive()

    async def changed(self) -> None:
        """Until a followed log says something new (since the last time this returned)."""
        await self._changes.receive()


def _follow(followed: dict[str, _Followed], wanted: Mapping[str, Log]) -> None:
    for sid in [s for s in followed if s not in wanted]:
        del followed[sid]
    for sid, (path, pid, prefix) in wanted.items():
        current = followed.get(sid)
        if current is None or str(current.tail.path) != path or current.prefix != prefix:
            current = followed[sid] = _Followed(LogTail(path), prefix=prefix)
        current.writer(pid)


def _update_all(followed: Mapping[str, _Followed]) -> bool:
    changed = False
    for f in followed.values():
        changed = f.update() or changed
    return changed
