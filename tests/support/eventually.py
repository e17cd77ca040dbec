"""Waiting in a test: a condition polled until it holds, with a deadline; never a fixed sleep.

A test that waits for something (a message to arrive, a process to start or end, a file to
be written) asks for that thing, here, so it goes on the moment it holds and fails, naming
what it waited for, when it does not hold in time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

EVERY_S = 0.02
"""How often a condition is asked: a fiftieth of a second is past what a person or a test
notices, and keeps a polling test from taking a core."""


def _said(condition: Callable[[], object], what: str) -> str:
    return what or getattr(condition, "__qualname__", repr(condition))


def eventually(
    condition: Callable[[], object],
    timeout: float = 15.0,
    *,
    every: float = EVERY_S,
    what: str = "",
) -> None:
    """Return once `condition()` is true; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {_said(condition, what)}")
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
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {_said(condition, what)}")
        await anyio.sleep(every)
