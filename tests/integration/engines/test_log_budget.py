"""Reading a log has a budget: EngineLogs answers by the tick's deadline with what it read,
says how far behind it is, and reads on at the next ask; a log that floods never holds a
tick past its deadline. Real files, a real writer process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from placewatch.worker.deadline import Deadline
from placewatch.worker.engines.evidence.follow import (
    ANSWER_S,
    FIRST_BYTES,
    FIRST_S,
    MOST_BYTES,
    EngineLogs,
    Log,
)
from placewatch.worker.engines.evidence.source import PathLog

KEYWORDS = "load_tensors: offloaded 1/33 layers to GPU ... CUDA0 model buffer size = 12.00 MiB\n"
"""A line every reader looks at: the costliest kind to parse."""
LATE_S = 0.25
"""What an answer may come after its deadline on a loaded two-core machine: the chunk under
way (ANSWER_S is given for it), and the event loop's turn."""


def with_logs(body: Callable[[EngineLogs], Awaitable[None]]) -> None:
    async def main() -> None:
        logs = EngineLogs()
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            await body(logs)
            tg.cancel_scope.cancel()

    anyio.run(main, backend="asyncio")


def placed(path: Path) -> dict[str, Log]:
    return {"a": Log(PathLog(str(path), os.getpid()))}


def test_a_log_past_the_budget_answers_by_the_deadline_behind_and_reads_on(
    tmp_path: Path,
) -> None:
    log = tmp_path / "chatty.log"
    log.write_text("")

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read(placed(log)))["a"].behind_bytes is None
        # Appended since: read in full (only a log first followed is read from its end).
        log.write_text(KEYWORDS * ((MOST_BYTES + (16 << 20)) // len(KEYWORDS)))
        deadline = Deadline.after(0.3)
        said = (await logs.read(placed(log), deadline=deadline))["a"]
        assert time.monotonic() - deadline.at < LATE_S
        assert said.behind_bytes is not None and said.behind_bytes > 0
        first = said.behind_bytes
        said = (await logs.read(placed(log), deadline=Deadline.after(0.3)))["a"]
        assert said.behind_bytes is not None and said.behind_bytes < first  # read on
        while said.behind_bytes:
            said = (await logs.read(placed(log)))["a"]  # no deadline: MOST_BYTES an ask
        assert said.layers_offloaded == 1 and said.behind_bytes is None

    with_logs(body)


FLOOD = """
import sys, time
lines = sys.argv[2].encode() * (800_000 // len(sys.argv[2]))
with open(sys.argv[1], "ab", buffering=0) as out:
    while True:
        started = time.monotonic()
        out.write(lines)
        time.sleep(max(0.0, 0.01 - (time.monotonic() - started)))
"""
"""Appends keyword lines at up to 80 MB/s, the rate that stalled every tick before."""


def test_a_flooding_log_never_holds_an_ask_past_its_deadline(tmp_path: Path) -> None:
    log = tmp_path / "flood.log"
    log.write_text("")
    writer = subprocess.Popen([sys.executable, "-c", FLOOD, str(log), KEYWORDS])
    late: list[float] = []
    behind: list[int | None] = []

    async def body(logs: EngineLogs) -> None:
        for _ in range(8):
            deadline = Deadline.after(0.3)
            said = (await logs.read(placed(log), deadline=deadline))["a"]
            late.append(time.monotonic() - deadline.at)
            behind.append(said.behind_bytes)
            await anyio.sleep(0.2)  # the logs are looked at between asks too

    try:
        with_logs(body)
    finally:
        writer.kill()
        writer.wait()
        log.unlink()
    assert max(late) < LATE_S, late
    assert all(b for b in behind[2:]), behind  # it cannot keep up, and says so
    assert ANSWER_S < 0.3


def test_a_50_gib_log_s_newest_line_is_read_within_one_interval(tmp_path: Path) -> None:
    """A log already 50 GiB (sparse: a hole, then the lines) when first followed: its newest
    life is found from its end, not reached through 50 GiB of reads."""
    log = tmp_path / "huge.log"
    with log.open("wb") as out:
        out.truncate(50 << 30)
        out.seek(0, os.SEEK_END)
        out.write(b"\nbuild: 5400 (1a2b3c4d) with cc\n")
        out.write(b"load_tensors: offloaded 0/33 layers to GPU\n")
        out.write(b"load_tensors: offloaded 33/33 layers to GPU\n")
    assert log.stat().st_size > 50 << 30

    async def body(logs: EngineLogs) -> None:
        interval = 1.0
        deadline = Deadline.for_tick(interval)
        said = (await logs.read(placed(log), deadline=deadline))["a"]
        assert time.monotonic() - deadline.at < LATE_S
        assert (said.layers_offloaded, said.behind_bytes) == (33, None)

    try:
        with_logs(body)
    finally:
        log.unlink()


def test_an_ask_past_its_deadline_follows_its_logs_and_reads_a_new_one_s_start(
    tmp_path: Path,
) -> None:
    log = tmp_path / "engine.log"
    start = KEYWORDS * ((FIRST_BYTES - (8 << 10)) // len(KEYWORDS))
    log.write_text(start + "load_tensors: offloaded 33/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        passed = Deadline.after(0)
        said = (await logs.read(placed(log), deadline=passed))["a"]
        assert time.monotonic() - passed.at < FIRST_S + LATE_S  # its first read is waited for
        assert (said.layers_offloaded, said.behind_bytes) == (33, None)  # whatever the time
        with log.open("a") as out:
            out.write(KEYWORDS * 1000)
        passed = Deadline.after(0)
        said = (await logs.read(placed(log), deadline=passed))["a"]
        assert time.monotonic() - passed.at < LATE_S
        assert said.layers_offloaded == 33  # no time to read what was added: between ticks
        with anyio.fail_after(5):
            await logs.changed()
        assert (await logs.read(placed(log)))["a"].layers_offloaded == 1

    with_logs(body)
