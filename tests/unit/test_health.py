"""`placewatch health`: what a heartbeat file and a worker's answer say, judged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from placewatch.heartbeat import Beat, check_folder, judge_beat, parse_beat, write_beat
from placewatch.schemas import NodeTelemetry, encode
from placewatch.worker.health import TickBeats, judge_answer

NOW = 1_800_000_000.0


def beat_text(**changes: object) -> str:
    fields: dict[str, object] = {
        "pid": 41,
        "what": "alerts",
        "time": NOW - 4,
        "every_s": 5.0,
        "ok": True,
        "why": "connected to nats://nats-1:4222: the server answered a PING 4 s ago",
    }
    return json.dumps(fields | changes)


def test_a_fresh_heartbeat_says_what_the_process_said() -> None:
    assert judge_beat("/run/h", beat_text(), NOW) == (
        True,
        "placewatch alerts (pid 41): connected to nats://nats-1:4222: the server answered a "
        "PING 4 s ago",
    )


def test_a_fresh_heartbeat_that_says_unhealthy_is_unhealthy() -> None:
    ok, line = judge_beat("/run/h", beat_text(ok=False, why="no round trip with NATS"), NOW)
    assert (ok, line) == (False, "placewatch alerts (pid 41): no round trip with NATS")


def test_a_heartbeat_older_than_three_periods_is_a_stuck_or_stopped_process() -> None:
    assert judge_beat("/run/h", beat_text(time=NOW - 15), NOW)[0] is True  # three periods
    ok, line = judge_beat("/run/h", beat_text(time=NOW - 16), NOW)
    assert (ok, line) == (
        False,
        "placewatch alerts (pid 41) last wrote /run/h 16 s ago, though it writes every 5 s: "
        "it is stuck or has stopped",
    )


def test_no_file_and_a_file_that_is_not_a_heartbeat_are_unhealthy_saying_why() -> None:
    ok, line = judge_beat("/run/h", None, NOW)
    assert not ok and line.startswith("no heartbeat file /run/h: ")
    assert "PLACEWATCH_HEALTH_FILE" in line
    for text in ("", "{}", "[1]", beat_text(every_s=0), beat_text(time="soon")):
        assert judge_beat("/run/h", text, NOW) == (
            False,
            "/run/h is not a placewatch heartbeat; point --health-file at its own file",
        )


def test_a_written_heartbeat_reads_back(tmp_path: Path) -> None:
    beat = Beat(7, "watch", NOW, 5.0, True, "fine")
    write_beat(str(tmp_path / "h"), beat)
    assert parse_beat((tmp_path / "h").read_text()) == beat
    assert [p.name for p in tmp_path.iterdir()] == ["h"]  # no temporary file left


def test_a_folder_that_cannot_take_the_file_is_named(tmp_path: Path) -> None:
    assert check_folder(str(tmp_path / "h")) is None
    assert check_folder(str(tmp_path / "no" / "h")) == (
        f"health file {tmp_path}/no/h: the folder {tmp_path}/no does not exist; create it or "
        "pick another"
    )


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def test_the_worker_is_alive_while_it_waits_then_due_to_tick_every_interval() -> None:
    clock = Clock()
    beats = TickBeats("/run/h", 2.0, clock)
    clock.now += 600  # ten minutes without the server: starting, not stuck
    first = beats.beat()
    assert (first.ok, first.what, first.every_s) == (True, "run", 2.0)
    assert first.why == "starting: waiting for the server or the node's lease since 600 s ago"
    beats.running()
    clock.now += 7  # the first tick hangs past three intervals
    hung = beats.beat()
    assert not hung.ok
    assert hung.why.startswith("no tick for 7 s (its first tick not done; every 2 s): ")
    beats.ticked()
    clock.now += 2
    assert (beats.beat().ok, beats.beat().why) == (True, "ticking: 1 ticks, the last 2 s ago")


@pytest.mark.parametrize(("interval", "every"), [(0.1, 1.0), (2.0, 2.0), (60.0, 10.0)])
def test_the_worker_writes_every_interval_within_one_to_ten_seconds(
    interval: float, every: float
) -> None:
    assert TickBeats("/run/h", interval).every == every


def telemetry(age_s: float, interval: float = 2.0) -> NodeTelemetry:
    now = datetime(2026, 11, 30, 6, 12, 3, tzinfo=UTC)
    return NodeTelemetry(
        node="gpu-07",
        session="s",
        seq=9,
        time=now - timedelta(seconds=age_s),
        interval_s=interval,
        inventory="0a1b2c3d4e5f",
    )


def test_a_worker_that_answers_with_a_fresh_sample_is_healthy() -> None:
    data, headers = encode(telemetry(1.5))
    now = datetime(2026, 11, 30, 6, 12, 3, tzinfo=UTC)
    assert judge_answer("gpu-07", data, headers, 3.2, now) == (
        True,
        "node gpu-07's worker answered in 3 ms with a sample 1.5 s old (every 2 s, seq 9)",
    )
    msgpack, headers = encode(telemetry(5.9), "msgpack")
    assert judge_answer("gpu-07", msgpack, headers, 1, now)[0] is True


def test_a_sample_older_than_three_intervals_means_its_ticks_stopped() -> None:
    data, headers = encode(telemetry(6.5))
    now = datetime(2026, 11, 30, 6, 12, 3, tzinfo=UTC)
    assert judge_answer("gpu-07", data, headers, 2, now) == (
        False,
        "node gpu-07's worker answered in 2 ms with a sample 6.5 s old (every 2 s, seq 9): "
        "older than 6 s, so its ticks have stopped; its log says why",
    )


def test_an_error_answer_and_a_body_that_is_not_telemetry_are_unhealthy() -> None:
    headers = {
        "Nats-Service-Error": "no sample taken yet; ask again after one interval",
        "Nats-Service-Error-Code": "503",
    }
    assert judge_answer("gpu-07", b"", headers, 1) == (
        False,
        "node gpu-07's worker answered with error 503: no sample taken yet; ask again after "
        "one interval",
    )
    ok, line = judge_answer("gpu-07", b"[]", {}, 1)
    assert not ok and line.startswith("node gpu-07's worker answered with what is not telemetry: ")
