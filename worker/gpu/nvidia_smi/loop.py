"""nvidia-smi's GPU query looping by itself (`--loop-ms`), read pass by pass as it prints.

`nvidia-smi --query-gpu=FIELDS --format=csv,nounits --loop-ms=N` prints the header once,
then every N ms a pass: one row per GPU in index order, or, for a GPU the driver cannot
reach, a message where its row would be ("Unable to determine the device handle for GPU
...: Unknown Error"). Nothing marks where a pass ends: no blank line, no header again. The
`timestamp` field cannot tell either: it is taken per GPU, not per pass (the four rows of a
4x T4 capture in ../shared/corpus read .255, .261, .266 and .271). So the worker asks for
`count`, the number of GPUs nvidia-smi lists, which every row repeats: a pass is complete
once it holds that many rows and messages. A row for a GPU the pass already has (by index,
else UUID, else bus id), or the header again, begins the next pass and so proves the last
one complete, even in a capture without `count`. What a child printed of a pass it did not
finish is dropped with it.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from placewatch.schemas import GpuSample

from ...probe import ProbeRunner
from ...tool_loop import HANG_INTERVALS, RESTART_FIRST_S, RESTART_MOST_S, ToolLoop
from .. import values
from .query_csv import GPU_KEYS, Column, fit_row, gpus_of, parse_table


@dataclass(frozen=True)
class Pass:
    """One complete pass of the looping query."""

    gpus: tuple[GpuSample, ...]
    said: tuple[str, ...]
    """The messages printed in place of a GPU's row."""
    at: float
    """When it was complete (the clock's time)."""


class GpuPasses:
    """The LineSink of the looping GPU query: lines in, complete passes out (`latest`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.latest: Pass | None = None
        """The last complete pass; replaced whole, never changed."""
        self.complete = 0
        """How many passes were complete."""
        self._clock = clock
        self.started()

    def started(self) -> None:
        self._header: str | None = None
        self._columns: list[Column] = []
        self._width = 0
        self._keys: list[int] = []
        self._count_at: int | None = None
        self._begin()

    def _begin(self) -> None:
        self._rows: list[list[str]] = []
        self._said: list[str] = []
        self._seen: set[str] = set()
        self._count: int | None = None

    def line(self, text: str) -> bool:
        text = text.strip()
        if not text:
            return False
        if self._header is None:
            self._take_header(text)
            return False
        if text == self._header:
            return self._close()
        try:
            row = next(csv.reader([text], skipinitialspace=True))
        except csv.Error:  # not a row nvidia-smi prints (a stray carriage return)
            return False
        if len(row) == 1 and self._width > 1:
            self._said.append(text)
            return self._check()
        cells = fit_row(self._columns, row)  # as wide as the header, each cell stripped
        gpu = next((cells[i] for i in self._keys if cells[i]), text)
        closed = self._close() if gpu in self._seen else False
        self._rows.append(cells)
        self._seen.add(gpu)
        if self._count_at is not None:
            count = values.integer(cells[self._count_at])
            self._count = count if count is not None and count > 0 else self._count
        return self._check() or closed

    def _take_header(self, text: str) -> None:
        """The header, once a line is one: nothing before it can be read."""
        columns, _ = parse_table(text)
        names = [c.name for c in columns]
        if not set(names) & GPU_KEYS:
            return
        self._header, self._columns, self._width = text, columns, len(names)
        self._keys = [names.index(n) for n in ("index", "uuid", "pci.bus_id") if n in names]
        self._count_at = names.index("count") if "count" in names else None

    def _check(self) -> bool:
        if self._count is None or len(self._rows) + len(self._said) < self._count:
            return False
        return self._close()

    def _close(self) -> bool:
        """The pass so far is complete: it becomes `latest` if it holds anything."""
        rows, said = self._rows, self._said
        self._begin()
        if not rows and not said:
            return False
        self.latest = Pass(tuple(gpus_of(self._columns, rows)), tuple(said), self._clock())
        self.complete += 1
        return True


class GpuQueryLoop:
    """The looping GPU query of one nvidia-smi source: its child and its latest pass."""

    def __init__(
        self,
        runner: ProbeRunner,
        argv: Sequence[str],
        interval_s: float,
        *,
        refuses: Callable[[str], bool],
        restart_s: tuple[float, float] = (RESTART_FIRST_S, RESTART_MOST_S),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.passes = GpuPasses(clock)
        self.child = ToolLoop(
            runner, argv, interval_s, self.passes, refuses=refuses, restart_s=restart_s, clock=clock
        )
        self._clock = clock

    @property
    def trouble(self) -> str | None:
        return self.child.trouble

    @property
    def degraded(self) -> bool:
        return self.child.degraded

    @property
    def refused(self) -> str | None:
        return self.child.refused

    async def run(self, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED) -> None:
        await self.child.run(task_status=task_status)

    def fresh(self) -> Pass | None:
        """The latest pass if it is no older than a hung child's silence; asks for the next."""
        self.child.want()
        latest = self.passes.latest
        if not self.child.running or latest is None:
            return None
        if self._clock() - latest.at > HANG_INTERVALS * self.child.interval_s:
            return None
        return latest
