"""The measures the benchmarks set targets against: what they count must be what they say."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bench.footprint import growth
from bench.tick_cost import TimedNvml
from placewatch.worker.gpu.nvml import ProcessLists, read_gpus

from tests.support.fake_nvml import FakeNvml, FakeNvmlLibrary, captured


class SlowNvml(FakeNvmlLibrary):
    """The driver's process list, called through its function pointer, spins 2 ms of this
    thread's CPU, as the driver's listing does on a real node."""

    def _list(self, h: Any, count: Any, records: Any) -> int:
        deadline = time.thread_time() + 0.002
        while time.thread_time() < deadline:
            pass
        return super()._list(h, count, records)


def test_the_timed_bindings_read_what_the_bindings_read() -> None:
    timed = TimedNvml(FakeNvmlLibrary(captured()))
    gpus, problems = read_gpus(timed, ProcessLists())
    assert (gpus, problems) == read_gpus(FakeNvmlLibrary(captured()), ProcessLists())
    assert [g.index for g in gpus] == [0, 1] and problems == []
    # Constants and record types pass through untouched; functions are timed.
    assert timed.NVML_SUCCESS == 0
    assert timed.c_nvmlProcessInfo_v3_t is FakeNvmlLibrary.c_nvmlProcessInfo_v3_t
    assert timed.NVMLError is FakeNvml.NVMLError
    assert timed.calls > 2 * 10  # ten or more readings a GPU


def test_the_timed_bindings_count_the_cpu_of_the_calls_made_through_a_function_pointer() -> None:
    slow = SlowNvml(captured())
    timed = TimedNvml(slow)
    read_gpus(timed, ProcessLists())
    # Two GPUs, one process list each: at least their 4 ms, and not much besides.
    assert slow.lists == 2
    assert 0.004 <= timed.seconds < 0.004 + 0.05
    # What the clock reads add to each call is taken off: a microsecond or so, not the 2 ms.
    assert 0 < timed.overhead_s < 1e-4
    assert timed.reads_s == pytest.approx(timed.seconds - timed.calls * timed.overhead_s)
    assert timed.reads_s >= 0.004
    calls = timed.calls
    timed.reset()
    assert (timed.seconds, timed.calls) == (0.0, 0)
    read_gpus(timed, ProcessLists())
    assert timed.calls == calls and timed.seconds >= 0.004


def test_growth_is_the_slope_an_hour_past_the_first_tenth() -> None:
    # 40 MiB flat, with the start's growth (imports, first ticks) in the first tenth.
    flat = [(t * 0.5, 30.0 + t if t < 10 else 40.0) for t in range(200)]
    slope, moved = growth(flat)
    assert slope == pytest.approx(0.0) and moved == pytest.approx(0.0)
    # 1 MiB every 360 s: 10 MiB an hour.
    rising = [(t * 0.5, 40.0 + t * 0.5 / 360) for t in range(7200)]
    slope, moved = growth(rising)
    assert slope == pytest.approx(10.0)
    # The first and last tenths of the 3,240 s kept: their middles 2,916 s apart.
    assert moved == pytest.approx(2916 / 360, rel=0.01)
    assert growth([(0.0, 40.0)]) == (0.0, 0.0)
