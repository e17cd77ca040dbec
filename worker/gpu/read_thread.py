"""A source's blocking reads, run off the event loop one at a time, a stuck one remembered.

NVML calls block in the driver and may never return (a GPU lost after an Xid), so a tick's
reads run in anyio's worker threads, through a CapacityLimiter of one: one read at a time.
A read that does not return keeps its thread: `busy` says so until it does, and the source
reads degraded meanwhile rather than queueing reads behind it. The caller stops waiting
when its cancel scope ends (a timeout; the read is abandoned, and its answer, if it ever
comes, is dropped).

Handing a read to anyio's pool costs about 0.3 ms of CPU after the loop's pause
(bench/nvml_parts.py), 0.015 % of a core at a 2 s interval: no reason for a thread of
the source's own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


class ReadThread:
    """Runs a source's blocking reads in a worker thread, one at a time."""

    def __init__(self) -> None:
        self._limiter = anyio.CapacityLimiter(1)
        self._lock = threading.Lock()
        self._running = 0
        """Reads started in a thread that have not returned."""

    @property
    def busy(self) -> bool:
        """A read has not returned: one stuck in the driver, or still going."""
        return self._running > 0

    async def run(self, read: Callable[[], T]) -> T:
        """`read()`'s answer or exception, from a worker thread."""

        def counted() -> T:
            with self._lock:
                self._running += 1
            try:
                return read()
            finally:
                with self._lock:
                    self._running -= 1

        return await anyio.to_thread.run_sync(
            counted, abandon_on_cancel=True, limiter=self._limiter
        )
