"""The tick's one deadline: what is left of it, and a scope that stops waiting there."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel

from placewatch.worker.deadline import INPUT_SHARE, NEVER, Deadline


def test_for_tick_gives_the_inputs_their_share_of_the_interval() -> None:
    before = time.monotonic()
    deadline = Deadline.for_tick(2.0)
    assert before + 2.0 * INPUT_SHARE <= deadline.at <= time.monotonic() + 2.0 * INPUT_SHARE


def test_left_is_never_negative_and_passed_says_so() -> None:
    gone = Deadline(time.monotonic() - 5.0)
    assert gone.left() == 0.0
    assert gone.passed
    assert not Deadline.after(60.0).passed
    assert 59.0 < Deadline.after(60.0).left() <= 60.0


def test_a_negative_wait_is_a_deadline_now() -> None:
    assert Deadline.after(-3.0).left() == 0.0


def test_never_waits_for_everything() -> None:
    assert NEVER.left() == float("inf")
    assert not NEVER.passed


def test_scope_stops_a_wait_that_outlives_the_deadline() -> None:
    deadline = Deadline.after(0.05)

    async def wait() -> bool:
        with deadline.scope() as scope:
            await anyio.sleep(30)
        return scope.cancelled_caught

    assert anyio.run(wait, backend="asyncio")
    assert deadline.passed


def test_scope_leaves_a_quick_wait_alone() -> None:
    async def wait() -> bool:
        with Deadline.after(30).scope() as scope:
            await anyio.lowlevel.checkpoint()
        return scope.cancelled_caught

    assert not anyio.run(wait, backend="asyncio")
