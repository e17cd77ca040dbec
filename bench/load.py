"""The load a bench offers: sent on its schedule, counted, and held against what was asked.

A publisher on a busy machine falls behind its schedule and sends less than the step it
serves claims, and what the step measures (a message's age, a CPU share) then looks better
for the smaller load: at 12,500 nodes over 4 partitions, fan_in.py's publishers once sent
9,131 messages a second of the 12,500 asked and the step passed. So a bench that offers a
load counts what it sent inside its measured window, and `offered()` holds that against
what it asked: under TOLERANCE of it, the step fails whatever it measured.

A publisher in a process of its own counts with a Tally (a file of (time, total) lines);
the measuring process reads what was sent in its window with `sent_between`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.lowlevel

TOLERANCE = 0.95
"""A step offered its load when at least 95 % of the asked rate was sent over its window:
a publisher that falls a second behind in a 20 s window passes, two seconds do not."""
TALLY_EVERY_S = 0.2
"""How often a Tally writes its line: a window's edges are read to within a fifth of a
second of sends (interpolated between lines)."""
SLEEP_AHEAD_S = 0.005
"""A paced publisher sleeps only when this far ahead of its schedule: at 5,000 messages a
second a sleep a message would cost more than the sends."""


@dataclass(frozen=True)
class Offered:
    """What a step asked, and what was sent (and received, where the bench counts it) in
    its window."""

    what: str
    """What is counted, plural: "telemetry messages", "ticks"."""
    asked_per_s: float
    sent: int
    window_s: float
    received: int | None = None
    edge: int = 0
    """Sends the window's edges may cut off, counted as sent: one a sender where the window
    does not start with a send (a worker's ticks), none where it does (fan-in's nodes)."""

    @property
    def offered_per_s(self) -> float:
        return self.sent / self.window_s if self.window_s > 0 else 0.0

    @property
    def received_per_s(self) -> float | None:
        if self.received is None or self.window_s <= 0:
            return None
        return self.received / self.window_s

    @property
    def met(self) -> bool:
        """At least TOLERANCE of the asked rate sent over the window."""
        return self.sent + self.edge >= TOLERANCE * self.asked_per_s * self.window_s

    def line(self) -> str:
        """The load beside the result: asked, offered, received, and whether it holds."""
        share = self.offered_per_s / self.asked_per_s if self.asked_per_s else 0.0
        said = (
            f"load: {self.what} asked {rate(self.asked_per_s)}/s, offered "
            f"{rate(self.offered_per_s)}/s ({share:.2f}) over {self.window_s:.0f} s"
        )
        if self.received_per_s is not None:
            said += f", received {rate(self.received_per_s)}/s"
        if self.met:
            return said + ": offered"
        return (
            f"{said}: NOT OFFERED (under {TOLERANCE:.0%} of it): what this step measured "
            "is not at the load it names"
        )


def rate(per_s: float) -> str:
    """A rate as the tables print it: whole numbers, thousands separated, or two
    decimals under 10."""
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2f}"


def offered(
    what: str,
    *,
    asked_per_s: float,
    sent: int,
    window_s: float,
    received: int | None = None,
    edge: int = 0,
) -> Offered:
    """What `sent` in `window_s` seconds offered of `asked_per_s`."""
    return Offered(what, asked_per_s, sent, window_s, received, edge)


class Tally:
    """A publisher process's count of what it sent, as `time total` lines in a file, a line
    at most every TALLY_EVERY_S (line-buffered: a publisher killed at the end of a step has
    written all but its last fifth of a second)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", buffering=1)
        self.total = 0
        self.next_line = 0.0
        self.file.write(f"{time.time():.6f} 0\n")

    def add(self, n: int = 1) -> None:
        self.total += n
        now = time.time()
        if now >= self.next_line:
            self.file.write(f"{now:.6f} {self.total}\n")
            self.next_line = now + TALLY_EVERY_S

    def close(self) -> None:
        self.file.write(f"{time.time():.6f} {self.total}\n")
        self.file.close()


def tally_lines(text: str) -> list[tuple[float, int]]:
    """A Tally's (time, total) lines; a torn last line (no newline yet) is left out."""
    lines = []
    for line in text.split("\n")[:-1]:
        parts = line.split()
        if len(parts) == 2:
            try:
                lines.append((float(parts[0]), int(parts[1])))
            except ValueError:
                continue
    return lines


def total_at(lines: list[tuple[float, int]], at: float) -> float:
    """The total sent by `at`, interpolated between the lines around it; the last total
    after the last line (the publisher stopped sending), 0 before the first."""
    before = (0.0, 0)
    for t, total in lines:
        if t >= at:
            if t == before[0]:
                return float(total)
            return before[1] + (total - before[1]) * (at - before[0]) / (t - before[0])
        before = (t, total)
    return float(before[1])


def sent_between(path: Path, start: float, end: float) -> int:
    """What the Tally at `path` counted sent from `start` to `end` (times of time.time())."""
    lines = tally_lines(path.read_text()) if path.exists() else []
    return round(total_at(lines, end) - total_at(lines, start))


async def paced(
    send: Callable[[int, int], Awaitable[int]], senders: int, interval_s: float, tally: Tally
) -> None:
    """`send(j, cycle)` for each of `senders` once every `interval_s`, sender j at j/senders
    into each interval, for ever; each counted in `tally` (send returns how many messages it
    sent). A sender past its time is sent at once, so a publisher that falls behind catches
    up if it can, and its Tally says when it could not."""
    start = time.time()
    cycle = 0
    while True:
        for j in range(senders):
            ahead = start + (cycle + j / senders) * interval_s - time.time()
            if ahead > SLEEP_AHEAD_S:
                await anyio.sleep(ahead)
            elif j % 64 == 0:  # behind: let the connection's flusher write meanwhile
                await anyio.lowlevel.checkpoint()
            tally.add(await send(j, cycle))
        cycle += 1
