"""Host sampling: CPU use over a window long enough to mean something."""

from __future__ import annotations

import time
from collections import namedtuple
from types import SimpleNamespace

import psutil
import pytest

from placewatch.worker import host as host_module
from placewatch.worker.host import MIN_WINDOW_S, HostSampler


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
    monkeypatch.setattr(host_module, "cpu_times", lambda: next(times))
    host = HostSampler()
    assert host.sample().cpu_pct == 12.5
    assert slept == [pytest.approx(MIN_WINDOW_S)]
    clock[0] += MIN_WINDOW_S * 0.6
    assert host.ready()
    assert host.sample().cpu_pct == 12.5
    clock[0] += MIN_WINDOW_S * 0.6  # 1.2 windows after the reading
    assert host.sample().cpu_pct == 40.0
    assert len(slept) == 1


def test_cpu_use_is_busy_seconds_over_all_seconds_as_psutil_counts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(
        host_module, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda _: None)
    )
    times = namedtuple("times", "user nice system idle iowait guest guest_nice")
    # guest and guest_nice are inside user and nice already; idle and iowait are not busy.
    first, later = times(1, 0, 1, 6, 2, 0.5, 0), times(1.5, 0, 1.5, 9, 2, 0.5, 0)
    read = iter([first, first, later])
    monkeypatch.setattr(psutil, "cpu_times", lambda: next(read))
    memory = SimpleNamespace(total=8 << 30, available=3 << 30)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory)
    assert host_module.cpu_times() == (2.0, 10.0)
    host = HostSampler()
    clock[0] += 1
    sample = host.sample()
    assert sample.cpu_pct == 25.0  # 1 s busy of 4
    assert (sample.memory_total_bytes, sample.memory_available_bytes) == (8 << 30, 3 << 30)


def test_this_machines_readings_are_psutils() -> None:
    sample = HostSampler().sample()
    memory = psutil.virtual_memory()
    assert sample.memory_total_bytes == memory.total
    assert sample.memory_available_bytes is not None
    assert abs(sample.memory_available_bytes - memory.available) < 256 << 20  # a moment apart
    assert sample.cpu_count == psutil.cpu_count(logical=True)
