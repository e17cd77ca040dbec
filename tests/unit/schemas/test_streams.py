"""The table of streams and buckets: what each holds under a prefix, and the NATS CLI
command an operator runs to make it as the worker would."""

from __future__ import annotations

from placewatch.schemas.streams import (
    BUCKETS,
    COMPUTE,
    EVENTS,
    INVENTORY,
    LEASES,
    PLACEMENTS,
    STREAMS,
    TELEMETRY,
    Stream,
)


def test_the_events_stream_takes_compute_and_fallback_under_the_prefix() -> None:
    assert EVENTS.subjects() == ["placewatch.compute.>", "placewatch.fallback.>"]
    assert EVENTS.subjects("pw") == ["pw.compute.>", "pw.fallback.>"]


def test_the_telemetry_stream_takes_one_subject_per_node() -> None:
    assert TELEMETRY.subjects() == ["placewatch.telemetry.*"]
    assert TELEMETRY.subjects("pw") == ["pw.telemetry.*"]


def test_the_events_command_sets_the_duplicate_window_in_minutes() -> None:
    assert EVENTS.command("pw", "file", 3) == (
        "nats stream add PLACEWATCH_EVENTS --subjects 'pw.compute.>,pw.fallback.>' "
        "--storage file --replicas 3 --dupe-window 5m --defaults"
    )


def test_the_telemetry_command_keeps_one_message_per_subject() -> None:
    assert TELEMETRY.command("placewatch", "memory", 1) == (
        "nats stream add PLACEWATCH_TELEMETRY --subjects 'placewatch.telemetry.*' "
        "--storage memory --replicas 1 --max-msgs-per-subject 1 --defaults"
    )


def test_a_window_that_is_not_whole_minutes_is_written_as_a_fraction() -> None:
    stream = Stream("S", "events", "test", duplicate_window_s=90.0)
    assert stream.command("p", "file", 1) == (
        "nats stream add S --subjects 'p.compute.>,p.fallback.>' "
        "--storage file --replicas 1 --dupe-window 1.5m --defaults"
    )


def test_a_bucket_command_and_the_stream_that_holds_it() -> None:
    assert PLACEMENTS.command("file", 1) == (
        "nats kv add placewatch_placements --history 1 --storage file --replicas 1"
    )
    assert COMPUTE.command("memory", 3) == (
        "nats kv add placewatch_compute --history 1 --storage memory --replicas 3"
        " && nats stream edit KV_placewatch_compute --no-allow-rollup -f"
    )
    assert LEASES.command("file", 3) == (
        "nats kv add placewatch_leases --history 1 --storage file --replicas 3"
        " && nats stream edit KV_placewatch_leases --no-allow-rollup -f"
    )
    assert (PLACEMENTS.stream, COMPUTE.stream, LEASES.stream) == (
        "KV_placewatch_placements",
        "KV_placewatch_compute",
        "KV_placewatch_leases",
    )


def test_buckets_every_node_writes_take_no_rollup() -> None:
    # One node's `Nats-Rollup: all` on its own key would wipe every other node's keys.
    assert (PLACEMENTS.rollup, COMPUTE.rollup, LEASES.rollup) == (True, False, False)
    assert LEASES.command("file", 3) == (
        "nats kv add placewatch_leases --history 1 --storage file --replicas 3"
        " && nats stream edit KV_placewatch_leases --no-allow-rollup -f"
    )


def test_the_table_lists_each_stream_and_bucket_once() -> None:
    assert [s.name for s in STREAMS] == [
        "PLACEWATCH_EVENTS",
        "PLACEWATCH_TELEMETRY",
        "PLACEWATCH_INVENTORY",
    ]
    assert [b.name for b in BUCKETS] == [
        "placewatch_placements",
        "placewatch_compute",
        "placewatch_leases",
    ]
    assert (EVENTS.duplicate_window_s, EVENTS.max_msgs_per_subject) == (300.0, None)
    assert (TELEMETRY.duplicate_window_s, TELEMETRY.max_msgs_per_subject) == (None, 1)
    assert (INVENTORY.duplicate_window_s, INVENTORY.max_msgs_per_subject) == (None, 1)
    assert INVENTORY.subjects("pw") == ["pw.inventory.*"]
