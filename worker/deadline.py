"""The one moment a tick publishes by, whatever its inputs do.

Every input a tick waits on (the GPU tools, the engine logs, an engine's HTTP answer) is
something a driver or a local user can stall: a tool stuck in the driver, a log growing
80 MB a second, a health URL that never answers. Each is given what is left of the same
deadline, and what it could not give by then is marked as not read, never waited for: the
telemetry goes out every interval, so a live node never looks silent.

Times are `time.monotonic()`, the clock anyio's asyncio backend runs on, so a deadline can
be handed to a worker thread as a plain float and checked there between reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio

INPUT_SHARE = 0.4
"""The share of an interval the tick's inputs may take; the rest judges, builds and
publishes, which takes milliseconds (docs/benchmarks.md, `python bench/tick_cost.py`). A tick
whose inputs answer at once may follow one that waited out its share, so two telemetry
messages can be (1 + INPUT_SHARE) intervals apart: 1.4, with room under the 1.5 that
tests/integration/test_hanging_tool.py holds a node to for a loaded machine's scheduling."""


@dataclass(frozen=True)
class Deadline:
    at: float
    """time.monotonic() by which the inputs must have answered."""

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + max(0.0, seconds))

    @classmethod
    def for_tick(cls, interval_s: float) -> Deadline:
        """The inputs' deadline of a tick that starts now."""
        return cls.after(interval_s * INPUT_SHARE)

    def left(self) -> float:
        """Seconds left, never below 0."""
        return max(0.0, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def scope(self) -> anyio.CancelScope:
        """A scope that stops waiting at the deadline (`with deadline.scope():`): what was
        not done by then is left undone, and `scope.cancelled_caught` says so."""
        return anyio.move_on_after(self.left())


NEVER = Deadline(float("inf"))
"""For a one-off read (`placewatch sample`, `doctor`) that waits for every input."""
