"""The recheck limit: one at a time, one a second, and what a refused request is told."""

from __future__ import annotations

from placewatch.worker.bus.service import RecheckLimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_recheck_at_a_time_and_one_a_second() -> None:
    clock = Clock()
    limit = RecheckLimit(clock=clock)
    assert limit.refusal() is None  # the first starts
    clock.now += 0.25
    assert limit.refusal() == (
        "a recheck is under way (started 0.2 s ago); one runs at a time: ask again in 1 s"
    )
    clock.now += 0.25
    limit.finished()
    assert limit.refusal() == (
        "a recheck started 0.5 s ago; at most one a second: ask again in 0.5 s"
    )
    clock.now += 0.49
    assert limit.refusal() == (
        "a recheck started 1.0 s ago; at most one a second: ask again in 0.1 s"
    )
    clock.now += 0.01
    assert limit.refusal() is None  # a second after the last one started
    assert limit.running


def test_a_recheck_longer_than_the_period_holds_the_next_until_it_ends() -> None:
    clock = Clock()
    limit = RecheckLimit(every=2.0, clock=clock)
    assert limit.refusal() is None
    clock.now += 5
    assert limit.refusal() == (
        "a recheck is under way (started 5.0 s ago); one runs at a time: ask again in 2 s"
    )
    limit.finished()
    assert limit.refusal() is None
    clock.now += 1
    limit.finished()
    assert (
        limit.refusal() == "a recheck started 1.0 s ago; at most one every 2 s: ask again in 1.0 s"
    )
