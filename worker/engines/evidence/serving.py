"""Whether an engine is serving: the requests its own log shows running, and when.

Memory held and layers offloaded say where an engine put its model; the requests it runs
say it computes now, so that a GPU showing no activity meanwhile means the compute is
elsewhere. Which lines say so is each engine's (its folder's `requests()`: llama-server's
slots, Ollama's gin lines); here is the window they make. A request starts and ends on one
of the engine's slots, or is logged once it is done, with how long it ran. The vLLM and
SGLang logs in the shared corpus carry no request lines, so none are read from them.

Times are the worker's own (time.monotonic() when the line was read), not the engine's,
whose clocks differ by build. Lines already in a log when it is first read are history:
a request they finished is not counted, and one they left running counts from then.
This module is read beside the evidence reader (read.py), not through it: its state is a
window of requests in time, not a finding.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .. import ENGINES
from ..base import RequestLine

KEEP_S = 120.0
"""Finished requests are kept this long after they ended: longer than any window asked."""
MAX_REQUESTS = 512
"""At most this many finished requests are kept (a busy engine finishes hundreds a minute)."""
MAX_RUNNING = 512
"""At most this many requests are kept running, the oldest dropped first: llama-server runs
one a slot (`-np`, a few to a few hundred), but a log may start one on a new slot id every
line and end none."""
_SCAN_CHARS = 1024

_READERS = [(e.name, r) for e in ENGINES if (r := e.requests()) is not None]
"""Each engine whose log shows requests, with its reader, in the registry's order."""


@dataclass(frozen=True)
class Request:
    """One request the engine ran: from `started` to `ended` (None: running)."""

    started: float
    ended: float | None = None
    busy_s: float | None = None
    """How long the engine itself says it took (llama.cpp's total time, Ollama's latency)."""


@dataclass(frozen=True)
class Serving:
    """The requests an engine's log showed, running ones included; a value no later line
    changes. `seen` is False until its log has shown any request at all."""

    engine: str | None = None
    requests: tuple[Request, ...] = ()
    seen: bool = False

    def since(self, start: float) -> list[Request]:
        """The requests running at or after `start`."""
        return [r for r in self.requests if r.ended is None or r.ended >= start]


class ServingLog:
    """The requests of one engine's output, read line by line."""

    def __init__(self) -> None:
        self._open: dict[int, Request] = {}
        self._done: deque[Request] = deque(maxlen=MAX_REQUESTS)
        self._engine: str | None = None
        self._snapshot: Serving | None = Serving()

    def read(self, line: str, at: float, history: bool = False) -> None:
        """One line of the engine's output, read at `at`; `history`: it was in the log
        before the log was first read. Never raises."""
        text = line[:_SCAN_CHARS]
        for engine, reader in _READERS:
            if reader.word in text:  # the first engine whose word the line holds reads it
                said = reader.read(text)
                if said is not None:
                    self._take(engine, said, at, history)
                return

    def _take(self, engine: str, said: RequestLine, at: float, history: bool) -> None:
        busy = said.busy_s
        if said.kind == "end":
            self._finish(said.slot, at, history, busy)
        elif said.kind == "start":
            self._engine, self._snapshot = engine, None
            self._open.pop(said.slot, None)  # a slot started again is the newest
            self._open[said.slot] = Request(started=at)
            if len(self._open) > MAX_RUNNING:
                del self._open[next(iter(self._open))]
        elif busy is not None:  # done, and how long it ran
            self._engine, self._snapshot = engine, None
            if not history:
                self._done.append(Request(at - busy, at, busy))
            self._prune(at)

    def _finish(self, slot: int, at: float, history: bool, busy_s: float | None) -> None:
        request = self._open.pop(slot, None)
        if request is None:
            return  # its end was read already (print_timing, then release), or its start never
        if not history:
            self._done.append(Request(request.started, max(at, request.started), busy_s))
        self._prune(at)
        self._snapshot = None

    def _prune(self, now: float) -> None:
        while self._done and (self._done[0].ended or now) < now - KEEP_S:
            self._done.popleft()

    def snapshot(self) -> Serving:
        """What the log showed so far; the same value until a request line is read."""
        if self._snapshot is None:
            requests = (*self._done, *self._open.values())
            self._snapshot = Serving(self._engine, requests, seen=self._engine is not None)
        return self._snapshot
