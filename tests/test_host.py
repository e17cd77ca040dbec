"""Host sampling: CPU use over a window long enough to mean something."""

from __future__ import annotations

import time

import psutil

from placewatch.host import MIN_WINDOW_S, HostSampler


def test_a_sample_waits_out_a_short_window_and_says_when_it_would_not() -> None:
    host = HostSampler()
    assert not host.ready()
    started = time.monotonic()
    first = host.sample()
    assert time.monotonic() - started >= MIN_WINDOW_S * 0.9
    assert first.cpu_pct is not None and 0 <= first.cpu_pct <= 100
    assert not host.ready()  # the window starts again
    time.sleep(MIN_WINDOW_S)
    assert host.ready()
    started = time.monotonic()
    second = host.sample()
    assert time.monotonic() - started < MIN_WINDOW_S / 2
    assert second.memory_total_bytes == first.memory_total_bytes
    assert first.cpu_count == second.cpu_count == psutil.cpu_count(logical=True)
