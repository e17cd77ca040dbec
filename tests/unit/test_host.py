"""Host sampling: CPU use over a window long enough to mean something."""

from __future__ import annotations

import os
import time
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from placewatch.worker import host as host_module
from placewatch.worker.host import CLOCK_TICKS, MIN_WINDOW_S, HostSampler, _cpu_times, _memory
from placewatch.worker.procfs import KeptFile, read_proc


def test_the_first_sample_waits_out_the_window_and_later_ones_do_not() -> None:
    host = HostSampler()
    assert not host.ready()
    started = time.monotonic()
    first = host.sample()
    assert time.monotonic() - started >= MIN_WINDOW_S * 0.9
    assert first.cpu_pct is not None and 0 <= first.cpu_pct <= 100
    assert host.ready()
    time.sleep(MIN_WINDOW_S)
    second = host.sample()
    assert second.cpu_pct is not None and 0 <= second.cpu_pct <= 100
    assert second.memory_total_bytes == first.memory_total_bytes
    assert first.cpu_count == second.cpu_count == psutil.cpu_count(logical=True)


def test_a_sample_within_the_window_repeats_the_last_reading_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A tick on new evidence just after a scheduled one: no wait, the reading before it, and
    # the window runs on, so the next reading spans both.
    clock = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    # (busy, total) CPU seconds: 12.5% over the first window, 40% over the next.
    times = iter([(0.0, 0.0), (12.5, 100.0), (52.5, 200.0)])
    monkeypatch.setattr(
        host_module, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep)
    )
    monkeypatch.setattr(host_module, "_cpu_times", lambda _data: next(times))
    host = HostSampler()
    assert host.sample().cpu_pct == 12.5
    assert slept == [pytest.approx(MIN_WINDOW_S)]
    clock[0] += MIN_WINDOW_S * 0.6
    assert host.ready()
    assert host.sample().cpu_pct == 12.5
    clock[0] += MIN_WINDOW_S * 0.6  # 1.2 windows after the reading
    assert host.sample().cpu_pct == 40.0
    assert len(slept) == 1


# As proc(5) documents them: /proc/stat's first line sums every CPU, in clock ticks (user nice
# system idle iowait irq softirq steal guest guest_nice); /proc/meminfo is `Key:  value kB`.
STAT = (
    "cpu  6181 12 3125 63163 278 0 47 5 100 3\n"
    "cpu0 3090 6 1562 31581 139 0 23 2 50 1\n"
    "intr 123456 0 0\nctxt 987654\nbtime 1764633600\n"
)
MEMINFO = (
    "MemTotal:       24684084 kB\n"
    "MemFree:        24258644 kB\n"
    "MemAvailable:   24369424 kB\n"
    "Buffers:            5708 kB\n"
    "Cached:           318328 kB\n"
)


def _proc(tmp_path: Path, stat: str | None, meminfo: str | None) -> Path:
    for name, text in (("stat", stat), ("meminfo", meminfo)):
        if text is not None:
            (tmp_path / name).write_text(text)
    return tmp_path


def test_cpu_and_memory_are_read_from_the_two_lines_of_proc(tmp_path: Path) -> None:
    proc = _proc(tmp_path, STAT, MEMINFO)
    # busy: user nice system irq softirq steal (guest and guest_nice are inside user and nice)
    busy, total = _cpu_times(read_proc(proc / "stat"))
    assert busy * CLOCK_TICKS == pytest.approx(6181 + 12 + 3125 + 47 + 5)
    assert total * CLOCK_TICKS == pytest.approx(6181 + 12 + 3125 + 63163 + 278 + 47 + 5)
    assert _memory(read_proc(proc / "meminfo")) == (24684084 * 1024, 24369424 * 1024)
    sample = HostSampler(proc).sample()
    assert (sample.memory_total_bytes, sample.memory_available_bytes) == _memory(MEMINFO.encode())


def test_a_missing_or_unreadable_file_falls_back_to_psutil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = SimpleNamespace(total=8 << 30, available=3 << 30)
    times = namedtuple("times", "user nice system idle iowait guest guest_nice")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory)
    monkeypatch.setattr(psutil, "cpu_times", lambda: times(1, 0, 1, 6, 2, 0.5, 0))
    # No MemAvailable (Linux before 3.14): psutil works it out.
    old = _proc(tmp_path, "cpu  oops\n", "MemTotal:  1000 kB\nMemFree:  10 kB\n")
    assert _memory(read_proc(old / "meminfo")) == (8 << 30, 3 << 30)
    assert _cpu_times(read_proc(old / "stat")) == (2.0, 10.0)  # guest is inside user already
    assert _memory(read_proc(tmp_path / "none")) == (8 << 30, 3 << 30)
    assert _cpu_times(read_proc(tmp_path / "none")) == (2.0, 10.0)
    sample = HostSampler(tmp_path / "none").sample()
    assert (sample.memory_total_bytes, sample.memory_available_bytes) == (8 << 30, 3 << 30)


def test_this_machines_proc_reads_as_psutil_does() -> None:
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc here: psutil alone is used")
    memory_total, available = _memory(read_proc("/proc/meminfo"))
    memory = psutil.virtual_memory()
    assert memory_total == memory.total
    assert abs(available - memory.available) < 256 << 20  # read a moment apart
    busy, total = _cpu_times(read_proc("/proc/stat"))
    read = psutil.cpu_times()
    assert total == pytest.approx(sum(read) - read.guest - read.guest_nice, abs=5)
    assert busy == pytest.approx(
        sum(read) - read.guest - read.guest_nice - read.idle - read.iowait, abs=5
    )


def test_a_window_read_from_proc_at_one_end_and_psutil_at_the_other_is_in_one_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(
        host_module, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda _: None)
    )
    proc = _proc(tmp_path, STAT, MEMINFO)
    host = HostSampler(proc)
    busy, total = _cpu_times(read_proc(proc / "stat"))
    (proc / "stat").write_text("cpu  oops\n")  # no reading for the second: psutil's seconds
    times = namedtuple("times", "user nice system idle iowait")
    later = times(busy + 0.25, 0, 0, total - busy + 0.75, 0)  # 1 s more, a quarter busy
    monkeypatch.setattr(psutil, "cpu_times", lambda: later)
    clock[0] += 1
    assert host.sample().cpu_pct == 25.0


def test_a_kept_file_is_read_from_its_start_each_time_and_opened_again_after_a_failure(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stat"
    kept = KeptFile(path)
    assert kept.read() is None  # not there yet: nothing kept open
    path.write_bytes(b"cpu  1 2 3\n")
    assert kept.read() == b"cpu  1 2 3\n"
    path.write_bytes(b"cpu  4 5 6 7\n")  # the same file, written again in place
    assert kept.read() == kept.read() == b"cpu  4 5 6 7\n"
    assert kept.read(5) == b"cpu  "
    kept.close()
    kept._fd = unreadable = os.open(tmp_path, os.O_RDONLY)  # a directory's: reads fail
    assert kept.read() is None and held(kept) is None  # closed; the next read opens again
    with pytest.raises(OSError):
        os.fstat(unreadable)
    assert kept.read() == b"cpu  4 5 6 7\n"
    kept.close()
    assert held(kept) is None


def held(kept: KeptFile) -> int | None:
    return kept._fd


def test_the_host_sampler_keeps_its_two_files_open_between_samples(tmp_path: Path) -> None:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd here to count descriptors in")
    proc = _proc(tmp_path, STAT, MEMINFO)
    before = len(os.listdir("/proc/self/fd"))
    host = HostSampler(proc)
    host.sample()
    assert len(os.listdir("/proc/self/fd")) == before + 2
    (proc / "meminfo").write_text(MEMINFO.replace("24369424", "1000"))
    assert host.sample().memory_available_bytes == 1000 * 1024  # read afresh, not kept
    del host
    assert len(os.listdir("/proc/self/fd")) == before
