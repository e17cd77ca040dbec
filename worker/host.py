"""The node's own CPU and memory: /proc/stat and /proc/meminfo, read by hand, psutil where
they cannot be.

psutil reads the same two files but parses every line of each into a named tuple, where the
sample needs one line of the first and two of the second. Both are kept open and read again
each sample (procfs.KeptFile). Where a file is missing or lacks its line (no MemAvailable
before Linux 3.14; not Linux at all), psutil works it out.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from placewatch.schemas import HostSample

from .procfs import KeptFile

MIN_WINDOW_S = 0.2
"""CPU use over a shorter window than this is noise: the first sample waits it out, and a
sample sooner than this after a reading repeats that reading."""
COUNT_EVERY_S = 60.0
"""How often the CPU count is read again: CPUs come and go rarely (hotplug in a VM), and the
read (sysconf, which opens /sys/devices/system/cpu/online) costs as much as the rest of a
sample."""


PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if "SC_CLK_TCK" in getattr(os, "sysconf_names", {}) else 100
"""/proc/stat's unit a second (USER_HZ: 100 on every Linux architecture but a few)."""


def _cpu_times(data: bytes | None) -> tuple[float, float]:
    """(busy, total) CPU seconds since boot, over every CPU, as psutil.cpu_percent counts
    them: the guest times are inside user and nice already, and idle and iowait are not
    busy. From /proc/stat's `cpu` line (`data`), else psutil: the same seconds either way,
    so that a window whose two ends were read differently still means something."""
    if data is not None and data.startswith(b"cpu "):
        try:
            times = [int(v) for v in data[4 : data.find(b"\n")].split()]
        except ValueError:
            times = []
        if len(times) >= 5:  # user nice system idle iowait [irq softirq steal guest guest_nice]
            total = sum(times[:8])
            return (total - times[3] - times[4]) / CLOCK_TICKS, total / CLOCK_TICKS
    cpu = psutil.cpu_times()
    seconds = sum(cpu) - getattr(cpu, "guest", 0.0) - getattr(cpu, "guest_nice", 0.0)
    return seconds - cpu.idle - getattr(cpu, "iowait", 0.0), seconds


def _memory(data: bytes | None) -> tuple[int, int]:
    """(total, available) bytes of memory: /proc/meminfo's (`data`) MemTotal and
    MemAvailable, else psutil's."""
    found: dict[bytes, int] = {}
    for line in (data or b"").split(b"\n", 8)[:8]:  # both are among the first lines
        key, _, value = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable"):
            number, _, unit = value.strip().partition(b" ")
            if number.isdigit() and unit in (b"kB", b""):
                found[key] = int(number) * (1024 if unit else 1)
    if len(found) == 2:
        return found[b"MemTotal"], found[b"MemAvailable"]
    memory = psutil.virtual_memory()
    return memory.total, memory.available


class HostSampler:
    """CPU use is measured between readings, so construction starts the clock.

    Only the first sample blocks (it sleeps out the first window): call that one from a
    thread. A sample sooner than MIN_WINDOW_S after the last reading (a tick on new
    evidence just after a scheduled one) repeats that reading at once, and the window
    runs on to the next.
    """

    def __init__(self, proc: Path = PROC) -> None:
        # psutil.cpu_percent keeps its last reading per thread (psutil 7): the first sample,
        # taken in another thread than this one, would read 0. The times are kept here.
        self._stat, self._meminfo = KeptFile(proc / "stat"), KeptFile(proc / "meminfo")
        self._times = _cpu_times(self._stat.read())
        self._since = time.monotonic()
        self._cpu: float | None = None
        self._cpu_count: int | None = None
        self._counted_at = 0.0

    def ready(self) -> bool:
        """Whether sample() returns at once, without waiting out the first window.

        It then only reads /proc/stat and /proc/meminfo, which never block.
        """
        return self._cpu is not None or time.monotonic() >= self._since + MIN_WINDOW_S

    def sample(self) -> HostSample:
        now = time.monotonic()
        if self._cpu is None and now < self._since + MIN_WINDOW_S:
            time.sleep(self._since + MIN_WINDOW_S - now)
            now = time.monotonic()
        if self._cpu is None or now >= self._since + MIN_WINDOW_S:
            self._cpu = self._cpu_since_last()
            self._since = now
        if self._cpu_count is None or now - self._counted_at >= COUNT_EVERY_S:
            self._cpu_count, self._counted_at = psutil.cpu_count(logical=True), now
        total, available = _memory(self._meminfo.read())
        try:
            load_1m: float | None = round(os.getloadavg()[0], 2)
        except OSError:  # not every platform keeps a load average
            load_1m = None
        return HostSample(
            cpu_pct=self._cpu,
            cpu_count=self._cpu_count,
            memory_total_bytes=total,
            memory_available_bytes=available,
            load_1m=load_1m,
        )

    def _cpu_since_last(self) -> float:
        (busy, total), (busy0, total0) = _cpu_times(self._stat.read()), self._times
        self._times = (busy, total)
        if total <= total0:
            return 0.0
        return round(min(max((busy - busy0) / (total - total0) * 100, 0.0), 100.0), 1)
