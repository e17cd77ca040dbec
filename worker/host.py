"""The node's own CPU and memory, through psutil."""

from __future__ import annotations

import os
import time

import psutil

from placewatch.schemas import HostSample

MIN_WINDOW_S = 0.2
"""CPU use over a shorter window than this is noise; the first call waits it out."""
COUNT_EVERY_S = 60.0
"""How often the CPU count is read again: CPUs come and go rarely (hotplug in a VM), and the
read (sysconf, which opens /sys/devices/system/cpu/online) costs as much as the rest of a
sample."""


class HostSampler:
    """CPU use is measured between calls, so construction starts the clock.

    Blocking (it may sleep out the first window): call it from a thread.
    """

    def __init__(self) -> None:
        psutil.cpu_percent(interval=None)
        self._since = time.monotonic()
        self._cpu_count: int | None = None
        self._counted_at = 0.0

    def ready(self) -> bool:
        """Whether sample() returns at once, without waiting out the CPU window.

        It then only reads /proc/stat and /proc/meminfo, which never block.
        """
        return time.monotonic() >= self._since + MIN_WINDOW_S

    def sample(self) -> HostSample:
        wait = self._since + MIN_WINDOW_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        cpu = psutil.cpu_percent(interval=None)
        self._since = time.monotonic()
        if self._cpu_count is None or self._since - self._counted_at >= COUNT_EVERY_S:
            self._cpu_count, self._counted_at = psutil.cpu_count(logical=True), self._since
        memory = psutil.virtual_memory()
        try:
            load_1m: float | None = round(os.getloadavg()[0], 2)
        except OSError:  # not every platform keeps a load average
            load_1m = None
        return HostSample(
            cpu_pct=min(100.0, cpu),
            cpu_count=self._cpu_count,
            memory_total_bytes=memory.total,
            memory_available_bytes=memory.available,
            load_1m=load_1m,
        )
