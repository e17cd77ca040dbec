"""The measures the benchmarks set targets against: what they count must be what they say."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench.footprint import growth
from bench.load import TOLERANCE, Tally, offered, sent_between, tally_lines, total_at
from bench.soak import scheduled
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


def test_a_step_whose_publishers_sent_under_the_tolerance_did_not_offer_its_load() -> None:
    # 12,500 nodes at 1 Hz over a 15 s window: 187,500 messages asked, 95 % of them 178,125.
    at = offered("telemetry messages", asked_per_s=12500, sent=178_125, window_s=15)
    assert TOLERANCE == 0.95 and at.met
    assert at.offered_per_s == pytest.approx(11_875)
    below = offered("telemetry messages", asked_per_s=12500, sent=178_124, window_s=15)
    assert not below.met
    # What the fan-in's publishers once sent at 12,500 nodes, and the step passed.
    short = offered(
        "telemetry messages", asked_per_s=12500, sent=9131 * 15, window_s=15, received=9100 * 15
    )
    assert not short.met
    assert short.line() == (
        "load: telemetry messages asked 12,500/s, offered 9,131/s (0.73) over 15 s, received "
        "9,100/s: NOT OFFERED (under 95% of it): what this step measured is not at the load "
        "it names"
    )
    assert at.line().endswith("(0.95) over 15 s: offered")


def test_a_window_that_cuts_a_tick_off_at_its_edge_still_offered_it() -> None:
    # A worker at 2 s over a 60 s window that starts between ticks: 30 asked, 29 or 28 seen.
    for seen, met in ((30, True), (28, True), (27, False)):
        ticks = offered("ticks", asked_per_s=0.5, sent=seen, window_s=60, edge=1)
        assert ticks.met is met, seen
    assert not offered("ticks", asked_per_s=0.5, sent=28, window_s=60).met
    assert offered("ticks", asked_per_s=0.5, sent=28, window_s=60, edge=1).line() == (
        "load: ticks asked 0.50/s, offered 0.47/s (0.93) over 60 s: offered"
    )


def test_what_a_tally_counted_in_a_window_is_read_between_its_lines(tmp_path: Path) -> None:
    lines = tally_lines("100.0 0\n100.5 50\n101.0 100\n102.0 100\n103.0 250\n103.5 2")
    assert lines[-1] == (103.0, 250)  # the torn last line left out
    assert total_at(lines, 99.0) == 0.0
    assert total_at(lines, 100.25) == pytest.approx(25.0)
    assert total_at(lines, 101.5) == pytest.approx(100.0)  # a stall: nothing sent
    assert total_at(lines, 104.0) == 250.0  # after the last line: it stopped
    path = tmp_path / "tally"
    path.write_text("100.0 0\n100.5 50\n101.0 100\n102.0 100\n103.0 250\n")
    assert sent_between(path, 100.25, 102.5) == 150
    assert sent_between(tmp_path / "none", 100.0, 200.0) == 0
    tally = Tally(tmp_path / "live")
    for _ in range(7):
        tally.add(3)
    tally.close()
    lines = tally_lines((tmp_path / "live").read_text())
    assert lines[0][1] == 0 and lines[-1][1] == 21
    assert sent_between(tmp_path / "live", lines[0][0] - 1, lines[-1][0] + 1) == 21


def test_the_soak_holds_the_faults_done_against_its_schedule() -> None:
    # Ten minutes, a quiet end of 20 s: a SIGKILL every minute after the first 30 s (90 s to
    # 570 s) and a recheck flood at 20 s into each minute (20 s to 560 s).
    assert scheduled(600, 20, 60) == (9, 10)
    assert scheduled(50, 8, 10) == (1, 1)
