"""A health URL asked within the tick's deadline: real TCP servers that answer late or never."""

from __future__ import annotations

import socket
import time

import anyio

from placewatch.worker.deadline import Deadline
from placewatch.worker.shards.readiness import HEALTH_TIMEOUT_S, Readiness, ReadinessChecks

from tests.support.eventually import EVERY_S
from tests.support.http_endpoint import Endpoint

WAIT_S = 0.1
"""What is left of each tick's deadline for the check."""


async def tick(checks: ReadinessChecks, url: str) -> tuple[Readiness | None, float]:
    """One tick's answer for shard `s`, and how long the tick waited for it."""
    began = time.monotonic()
    answer = await checks.ask("s", url, Deadline.after(WAIT_S))
    return answer, time.monotonic() - began


async def ticks_until_answered(
    checks: ReadinessChecks, url: str, within: float
) -> list[Readiness | None]:
    """Each tick's answer, ticking until one is not None; fails after `within` seconds."""
    answers: list[Readiness | None] = []
    limit = time.monotonic() + within
    while not answers or answers[-1] is None:
        assert time.monotonic() < limit, f"no answer within {within:g} s: {answers}"
        answers.append((await tick(checks, url))[0])
        await anyio.sleep(EVERY_S)
    return answers


def test_a_url_that_never_answers_holds_a_tick_no_longer_than_its_deadline() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts, never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/health"
        checks = ReadinessChecks()

        async def ticks() -> list[tuple[Readiness | None, float]]:
            found = [await tick(checks, url) for _ in range(3)]
            answers = await ticks_until_answered(checks, url, 5 * HEALTH_TIMEOUT_S)
            return [*found, (answers[-1], 0.0)]

        found = anyio.run(ticks, backend="asyncio")
        assert [a for a, _ in found[:3]] == [None, None, None]
        assert all(took < WAIT_S + 0.5 for _, took in found[:3]), found
        assert found[-1][0] == "unreachable"  # its own timeout ended it: a later tick took it
        listener.setblocking(False)
        accepted = []
        while True:
            try:
                accepted.append(listener.accept()[0])
            except BlockingIOError:
                break
        for conn in accepted:
            conn.close()
        assert len(accepted) == 1  # one check while it ran, not one a tick


def test_a_late_answer_serves_the_next_tick() -> None:
    endpoint = Endpoint(status=200, delay=0.5)
    checks = ReadinessChecks()
    url = f"{endpoint.base}/health"

    try:
        answers = anyio.run(ticks_until_answered, checks, url, 5.0, backend="asyncio")
        assert answers[0] is None and answers[-1] == "ok"
        assert len(endpoint.requests) == 1
    finally:
        endpoint.close()
