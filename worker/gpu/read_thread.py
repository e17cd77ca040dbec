"""One long-lived thread for a source's blocking reads, handed to it cheaply.

NVML calls block in the driver and may never return, so a tick's reads run off the event
loop. anyio.to_thread.run_sync takes about 0.3 ms of CPU to hand a call to its pool and
back after the loop's pause (its limiter, cancel scope and context copy, each tick); a
thread of the source's own, woken through a queue and answering through the loop's
call_soon_threadsafe, takes about half that (bench/nvml_parts.py times both). Every call
of the source then runs on the one thread, one at a time.

A read that does not return keeps the thread: `busy` says so until it does, and the
source reads degraded meanwhile rather than queueing reads behind it. The caller stops
waiting when its cancel scope ends (a timeout); the read's answer, if it ever comes, is
dropped. The thread ends after IDLE_S without a call and the next call starts another, so
a source dropped (a test's, a worker's reloaded) leaves no thread behind.

asyncio only, as the worker is (nats-py is asyncio-only): the answer comes back as an
asyncio future that anyio's cancel scopes cancel like any other await.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

IDLE_S = 30.0
"""A thread with no call for this long ends: past any interval a worker is run at."""

_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class ReadThread:
    """Runs a source's blocking reads on a thread of its own, one at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running = 0
        """Calls handed over that have not returned (in the thread or waiting for it)."""

    @property
    def busy(self) -> bool:
        """A call handed over has not returned: a read stuck in the driver, or still going."""
        return self._running > 0

    async def run(self, read: Callable[[], T]) -> T:
        """`read()`'s answer or exception, from the thread."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._running += 1
            self._calls.put((read, answer, loop))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
        return await answer

    def _serve(self) -> None:
        while True:
            try:
                read, answer, loop = self._calls.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:  # a call put meanwhile is taken by this thread, not lost
                    if self._calls.empty():
                        self._thread = None
                        return
                continue
            try:
                outcome: tuple[Any, BaseException | None] = (read(), None)
            except BaseException as exc:  # the caller's to raise, not the thread's
                outcome = (None, exc)
            with self._lock:
                self._running -= 1
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, answer, *outcome)
            del read, answer, loop, outcome  # hold nothing of a read while idle


def _settle(answer: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if answer.done():  # the caller gave up waiting (its timeout)
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)
