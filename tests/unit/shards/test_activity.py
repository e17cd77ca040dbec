"""The activity window: reads matched in time to the requests an engine ran."""

from __future__ import annotations

from placewatch.schemas import GpuProcess, GpuSample
from placewatch.worker.engines.evidence.serving import Request, Serving
from placewatch.worker.shards.activity import (
    MIN_IDLE_READS,
    Activity,
    ActivityWindows,
    IdleServing,
    Read,
    shard_usage,
)


def idle(at: float) -> Read:
    return Read(at, {0: 0.0}, {0: 0.0})


def busy(at: float, sm: float = 20.0) -> Read:
    return Read(at, {0: sm}, {0: 5.0})


def unknown(at: float) -> Read:
    return Read(at, {0: None}, {0: None})


def run(reads: list[Read], serving: Serving | None, now: float, placed: set[int] = {0}) -> Activity:  # noqa: B006
    windows = ActivityWindows()
    for read in reads:
        windows.observe("s", pid=7, read=read, serving=serving, placed=placed, now=read.at)
    return windows.observe("s", pid=7, read=None, serving=serving, placed=placed, now=now)


LONG = Serving("llama.cpp", (Request(10.0, 20.0, busy_s=9.5),), seen=True)


def test_reads_while_a_request_ran_all_idle_is_idle_serving() -> None:
    found = run([idle(12.0), idle(14.0), idle(16.0)], LONG, now=21.0)
    assert found.idle_serving == IdleServing("llama.cpp", 1, 9.5, 3, (0,))
    assert found.requests == 1 and found.sm_pct == 0.0


def test_one_read_with_activity_is_not() -> None:
    found = run([idle(12.0), busy(14.0), idle(16.0)], LONG, now=21.0)
    assert found.idle_serving is None
    assert found.sm_pct == round(20 / 3)


def test_reads_outside_the_requests_prove_nothing() -> None:
    # Before it began, within a second of its start, after it ended (its line read up to
    # half a second late): none is a read of it computing.
    found = run([idle(9.0), idle(10.5), idle(19.8), idle(25.0)], LONG, now=26.0)
    assert found.idle_serving is None


def test_fewer_reads_than_the_least_prove_nothing() -> None:
    reads = [idle(12.0 + 2 * n) for n in range(MIN_IDLE_READS - 1)]
    assert run(reads, LONG, now=21.0).idle_serving is None


def test_a_read_without_a_value_proves_nothing() -> None:
    found = run([idle(12.0), unknown(14.0), idle(16.0)], LONG, now=21.0)
    assert found.idle_serving is None and found.sm_pct == 0.0


def test_no_reading_at_all_has_no_sm_and_proves_nothing() -> None:
    found = run([unknown(12.0), unknown(14.0)], LONG, now=21.0)
    assert found == Activity(sm_pct=None, requests=1, idle_serving=None)


def test_a_running_request_counts_up_to_now() -> None:
    running = Serving("llama.cpp", (Request(10.0),), seen=True)
    found = run([idle(12.0), idle(14.0)], running, now=14.5)
    assert found.idle_serving is not None and found.idle_serving.busy_s is None


def test_without_requests_there_is_nothing_to_judge() -> None:
    quiet = Serving("llama.cpp", (), seen=True)
    found = run([idle(12.0), idle(14.0), idle(16.0)], quiet, now=17.0)
    assert found == Activity(sm_pct=0, requests=0, idle_serving=None)
    assert run([idle(12.0), idle(14.0)], None, now=15.0).requests is None  # no log at all


def test_every_placed_gpu_must_be_idle() -> None:
    reads = [Read(at, {0: 0.0, 1: 30.0}, {0: 0.0, 1: 3.0}) for at in (12.0, 14.0, 16.0)]
    assert run(reads, LONG, now=21.0, placed={0, 1}).idle_serving is None
    assert run(reads, LONG, now=21.0, placed={0, 1}).sm_pct == 30.0  # the busiest GPU


def test_memory_traffic_is_activity() -> None:
    reads = [Read(at, {0: 0.0}, {0: 4.0}) for at in (12.0, 14.0, 16.0)]
    assert run(reads, LONG, now=21.0).idle_serving is None


def test_the_finding_holds_between_requests_until_the_gpu_shows_activity() -> None:
    windows = ActivityWindows()
    for at in (12.0, 14.0, 16.0):
        windows.observe("s", pid=7, read=idle(at), serving=LONG, placed={0}, now=at)
    # 100 s later, no request in the window: still what was seen.
    later = windows.observe("s", pid=7, read=idle(120.0), serving=LONG, placed={0}, now=120.0)
    assert later.idle_serving is not None and later.requests == 0
    # Its GPU shows it computing: the finding ends.
    woke = windows.observe("s", pid=7, read=busy(122.0), serving=LONG, placed={0}, now=122.0)
    assert woke.idle_serving is None


def test_activity_before_the_requests_holds_the_finding_off_while_it_is_in_the_window() -> None:
    # A process's start shows in NVML's samples (1% SM once, as its context is made, on an
    # H200): idle reads while it serves decide only once that read has left the window.
    start = busy(1.0, sm=1.0)
    assert run([start, idle(12.0), idle(14.0), idle(16.0)], LONG, now=21.0).idle_serving is None
    found = run([start, idle(12.0), idle(14.0), idle(16.0)], LONG, now=31.5)
    assert found.idle_serving == IdleServing("llama.cpp", 1, 9.5, 3, (0,))


def test_another_process_starts_afresh() -> None:
    windows = ActivityWindows()
    for at in (12.0, 14.0, 16.0):
        windows.observe("s", pid=7, read=idle(at), serving=LONG, placed={0}, now=at)
    after = windows.observe("s", pid=8, read=None, serving=None, placed={0}, now=21.0)
    assert after == Activity()


def test_reads_older_than_the_window_are_dropped() -> None:
    windows = ActivityWindows(window_s=30.0)
    windows.observe("s", pid=7, read=busy(0.0, 90.0), serving=None, placed={0}, now=0.0)
    found = windows.observe("s", pid=7, read=idle(31.0), serving=None, placed={0}, now=31.0)
    assert found.sm_pct == 0.0


def test_a_shard_no_longer_tracked_is_forgotten() -> None:
    windows = ActivityWindows()
    windows.observe("s", pid=7, read=busy(1.0), serving=None, placed={0}, now=1.0)
    windows.forget(set())
    assert windows.observe("s", pid=7, read=None, serving=None, placed={0}, now=2.0) == Activity()


def test_usage_is_summed_over_a_shards_processes_per_gpu() -> None:
    gpus = [
        GpuSample(index=0, processes=[
            GpuProcess(pid=1, shard="a", sm_pct=10, mem_pct=1),
            GpuProcess(pid=2, shard="a", sm_pct=95, mem_pct=2),
            GpuProcess(pid=3, shard=None, sm_pct=50),
        ]),
        GpuSample(index=1, processes=[
            GpuProcess(pid=4, shard="a", sm_pct=None),
            GpuProcess(pid=5, shard="b", sm_pct=0, mem_pct=None),
        ]),
    ]  # fmt: skip
    assert shard_usage(gpus) == {
        "a": ({0: 105.0, 1: None}, {0: 3.0, 1: None}),  # capped where read
        "b": ({1: 0.0}, {1: None}),
    }
