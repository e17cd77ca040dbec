"""A source's reads off the loop: one at a time, answers and errors back, a stuck read held."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from placewatch.worker.gpu.read_thread import ReadThread

from tests.support.eventually import eventually


def run(main: Callable[[], Any]) -> Any:
    return anyio.run(main, backend="asyncio")


def test_reads_run_one_at_a_time_off_the_loop() -> None:
    reads = ReadThread()
    inside: list[int] = []  # reads running at once, as each read saw it
    loop_thread = threading.get_ident()

    def read(i: int) -> tuple[bool, int]:
        inside.append(i)
        time.sleep(0.01)
        assert inside == [i]
        inside.remove(i)
        return threading.get_ident() == loop_thread, i

    async def main() -> dict[int, tuple[bool, int]]:
        answers = {}

        async def ask(i: int) -> None:
            answers[i] = await reads.run(functools.partial(read, i))

        async with anyio.create_task_group() as tg:  # five asked at once
            for i in range(5):
                tg.start_soon(ask, i)
            await anyio.to_thread.run_sync(eventually, lambda: reads.busy)
        return answers

    assert run(main) == {i: (False, i) for i in range(5)}
    assert not reads.busy


def test_an_error_in_a_read_is_raised_to_the_caller_and_reads_go_on() -> None:
    reads = ReadThread()

    def fails() -> int:
        raise OSError(5, "driver said no")

    async def main() -> int:
        with pytest.raises(OSError, match="driver said no"):
            await reads.run(fails)
        return await reads.run(lambda: 7)

    assert run(main) == 7
    assert not reads.busy


def test_a_stuck_read_keeps_busy_until_it_returns_and_its_answer_is_dropped() -> None:
    reads = ReadThread()
    release = threading.Event()

    def stuck() -> str:
        release.wait(10)
        return "late"

    async def gives_up() -> str | None:
        with anyio.move_on_after(0.2):
            return await reads.run(stuck)
        return None

    assert run(gives_up) is None
    assert reads.busy
    # The loop that asked is closed by now: the late answer has nobody to go to.
    release.set()
    eventually(lambda: not reads.busy)

    async def again() -> str:
        return await reads.run(lambda: "fresh")

    assert run(again) == "fresh"
