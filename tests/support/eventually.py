"""Waiting in a test: a condition polled until it holds, with a deadline; never a fixed sleep.

A test that waits for something (a message to arrive, a process to start or end, a file to
be written) asks for that thing, here, so it goes on the moment it holds and fails, naming
what it waited for, when it does not hold in time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

EVERY_S = 0.02
"""How often a condition is asked: a fiftieth of a second is past what a person or a test
notices, and keeps a polling test from taking a core."""


def _holds(condition: Callable[[], object], deadline: float, timeout: float, what: str) -> bool:
    """Whether `condition()` holds; AssertionError, naming what was waited for, once it has not
    by `deadline`."""
    if condition():
        return True
    if time.monotonic() >= deadline:
        said = what or getattr(condition, "__qualname__", repr(condition))
        raise AssertionError(f"not within {timeout:g} s: {said}")
    return False


def eventually(
    condition: Callable[[], object],
    timeout: float = 15.0,
    *,
    every: float = EVERY_S,
    what: str = "",
) -> None:
    """Return once `condition()` is true; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not _holds(condition, deadline, timeout, what):
        time.sleep(every)


async def eventually_async(
    condition: Callable[[], object],
    timeout: float = 15.0,  # noqa: ASYNC109 (a deadline on polling, as `eventually` has)
    *,
    every: float = EVERY_S,
    what: str = "",
) -> None:
    """`eventually` for a test on the event loop: the loop runs on while it waits."""
    deadline = time.monotonic() + timeout
    while not _holds(condition, deadline, timeout, what):
        await anyio.sleep(every)


async def answered(
    ask: Callable[[], Awaitable[T]],
    timeout: float = 15.0,  # noqa: ASYNC109 (a deadline on polling, as `eventually` has)
    *,
    what: str = "",
) -> T:
    """What `ask()` answers once it answers without raising (a bucket a worker creates when
    it starts, a stream electing its leader); its last error after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await ask()
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(f"not within {timeout:g} s: {what or exc}") from exc
        await anyio.sleep(EVERY_S)
