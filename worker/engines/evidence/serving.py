"""Whether an engine is serving: the requests its own log shows running, and when.

Memory held and layers offloaded say where an engine put its model; the requests it runs
say it computes now, so that a GPU showing no activity meanwhile means the compute is
elsewhere. At its default verbosity llama-server prints, per request (b11434, 2026-11):

    0.03.049.435 I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0
    0.03.053.685 I slot print_timing: id  3 | task 0 |   total time =   4.17 ms /  34 tokens
    0.03.053.926 I slot      release: id  3 | task 0 | stop processing: n_tokens = 33, truncated = 0

(some spaces taken out here; builds of 2024 and 2025 print the same words without the time
prefix). Builds of early
2024 and forks such as ik_llama.cpp print `slot is processing task | ... id_slot=0` and
`slot released | ... id_slot=0` (and the same keys in JSON with `--log-format json`).
Ollama's server logs every answered HTTP request with its latency (gin), once it is done:

    [GIN] 2025/07/02 - 14:20:13 | 200 |  6.234077207s |       127.0.0.1 | POST     "/api/generate"

The vLLM logs in the shared corpus carry no request lines, so none are read from vLLM.

Times are the worker's own (time.monotonic() when the line was read), not the engine's,
whose clocks differ by build. Lines already in a log when it is first read are history:
a request they finished is not counted, and one they left running counts from then.
This module is read beside the evidence reader (read.py), not through it: its state is a
window of requests in time, not a finding.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

KEEP_S = 120.0
"""Finished requests are kept this long after they ended: longer than any window asked."""
MAX_REQUESTS = 512
"""At most this many finished requests are kept (a busy engine finishes hundreds a minute)."""
_SCAN_CHARS = 1024

_SLOT = re.compile(r"\b(launch_slot_|print_timing|release):\s+id\s+(\d+)\s+\|\s+task\s+-?\d+\s+\|")
_TOTAL = re.compile(r"total time\s*=\s*(\d{1,12}(?:\.\d{1,9})?)\s*ms")
_KEYED = re.compile(r"slot (is processing task|released)\b.*?\bid_slot\"?\s*[=:]\s*(\d+)")
_GIN = re.compile(
    r"\[GIN\][^|]*\|\s*(2\d\d)\s*\|\s*(\S+)\s*\|[^|]*\|\s*POST\s+\""
    r"(/api/(?:generate|chat|embed|embeddings)|/v1/(?:chat/completions|completions|embeddings))\""
)
_GO_DURATION = re.compile(r"([0-9.]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


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


def go_duration(text: str) -> float | None:
    """Seconds from a Go duration as gin prints it ("6.234077207s", "275.8ms", "1m2.5s")."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    try:
        return sum(float(n) * _GO_UNITS.get(u, 3600.0) for n, u in parts)
    except ValueError:
        return None


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
        if "slot" in text:
            self._llama(text, at, history)
        elif "[GIN]" in text:
            self._ollama(text, at, history)

    def _llama(self, text: str, at: float, history: bool) -> None:
        slot = _SLOT.search(text)
        keyed = None if slot else _KEYED.search(text)
        if slot is not None:
            what, number = slot[1], int(slot[2])
            if what == "launch_slot_" and "processing task" in text:
                self._start(number, at)
            elif what == "print_timing":
                total = _TOTAL.search(text, slot.end())
                if total is not None:
                    self._finish(number, at, history, float(total[1]) / 1000)
            elif what == "release" and "stop processing" in text:
                self._finish(number, at, history, None)
        elif keyed is not None:
            if keyed[1] == "released":
                self._finish(int(keyed[2]), at, history, None)
            else:
                self._start(int(keyed[2]), at)

    def _start(self, slot: int, at: float) -> None:
        self._engine = "llama.cpp"
        self._open[slot] = Request(started=at)
        self._snapshot = None

    def _finish(self, slot: int, at: float, history: bool, busy_s: float | None) -> None:
        request = self._open.pop(slot, None)
        if request is None:
            return  # its end was read already (print_timing, then release), or its start never
        if not history:
            self._done.append(Request(request.started, max(at, request.started), busy_s))
        self._prune(at)
        self._snapshot = None

    def _ollama(self, text: str, at: float, history: bool) -> None:
        match = _GIN.search(text)
        latency = None if match is None else go_duration(match[2])
        if latency is None:
            return
        self._engine = "ollama"
        if not history:
            self._done.append(Request(started=at - latency, ended=at, busy_s=latency))
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
