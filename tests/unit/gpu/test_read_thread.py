"""A source's own read thread: answers and errors come back, one thread, a stuck read held."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from placewatch.worker.gpu import read_thread
from placewatch.worker.gpu.read_thread import ReadThread


def run(main: Callable[[], Any]) -> Any:
    return anyio.run(main, backend="asyncio")


def wait_until(done: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not within 5 s"
        time.sleep(0.01)


def test_reads_run_one_at_a_time_on_one_thread_off_the_loop() -> None:
    reads = ReadThread("test-reads")
    inside: list[int] = []  # reads running at once, as each read saw it

    def read(i: int) -> tuple[str, int]:
        inside.append(i)
        time.sleep(0.01)
        assert inside == [i]
        inside.remove(i)
        return threading.current_thread().name, i

    async def main() -> dict[int, tuple[str, int]]:
        loop_thread = threading.get_ident()
        answers = {}

        async def ask(i: int) -> None:
            answers[i] = await reads.run(functools.partial(read, i))

        async with anyio.create_task_group() as tg:  # five asked at once
            for i in range(5):
                tg.start_soon(ask, i)
            await anyio.sleep(0.005)
            assert reads.busy
        assert threading.get_ident() == loop_thread
        return answers

    assert run(main) == {i: ("test-reads", i) for i in range(5)}
    assert not reads.busy


def test_an_error_in_a_read_is_raised_to_the_caller_and_the_thread_goes_on() -> None:
    reads = ReadThread("test-reads")

    def fails() -> int:
        raise OSError(5, "driver said no")

    async def main() -> int:
        with pytest.raises(OSError, match="driver said no"):
            await reads.run(fails)
        return await reads.run(lambda: 7)

    assert run(main) == 7


def test_a_stuck_read_keeps_the_thread_busy_until_it_returns_and_its_answer_is_dropped() -> None:
    reads = ReadThread("test-reads")
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
    wait_until(lambda: not reads.busy)

    async def again() -> str:
        return await reads.run(lambda: "fresh")

    assert run(again) == "fresh"


def test_an_idle_thread_ends_and_the_next_read_starts_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(read_thread, "IDLE_S", 0.05)
    reads = ReadThread("test-reads-idle")

    async def ident() -> int:
        return await reads.run(threading.get_ident)

    assert isinstance(run(ident), int)
    wait_until(lambda: not any(t.name == "test-reads-idle" for t in threading.enumerate()))
    assert reads._thread is None
    assert isinstance(run(ident), int)


def test_no_read_is_lost_to_a_thread_ending_as_it_is_handed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(read_thread, "IDLE_S", 0.001)  # ends between most calls
    reads = ReadThread("test-reads-race")

    async def main() -> list[int]:
        answers = []
        for i in range(300):
            with anyio.fail_after(5):
                answers.append(await reads.run(functools.partial(int, i)))
            if i % 3:
                time.sleep(0.001 * (i % 3))  # noqa: ASYNC251 - around the idle limit, loop held
        return answers

    assert run(main) == list(range(300))
