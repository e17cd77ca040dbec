"""The lease value and its expiry: what a worker writes for its node, how an entry the server
stored is read (a lease, a delete marker, a value that is not a lease), when it has expired by
the server's timestamp, and what a worker that finds it held or lost says."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from placewatch.schemas import LEASE_INTERVALS, NodeLease, encode
from placewatch.worker.bus.holder import Holder, held_message, holder_of, lost_message
from placewatch.worker.bus.lease import node_lease

STORED = datetime(2026, 11, 30, 6, 12, 3, 500000, tzinfo=UTC)
LEASE = NodeLease(
    node="gpu-07",
    session="d9eab6f1c983",
    host="gpu-07.rack4",
    pid=48121,
    started=datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC),
    interval_s=2.0,
)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def test_a_worker_writes_its_host_pid_session_start_and_interval() -> None:
    before = datetime.now(UTC)
    lease = node_lease("gpu-07", "abc123", 0.5)
    assert (lease.node, lease.session, lease.host, lease.pid, lease.interval_s) == (
        "gpu-07",
        "abc123",
        socket.gethostname(),
        os.getpid(),
        0.5,
    )
    assert before <= lease.started <= datetime.now(UTC)


def test_the_lease_travels_as_json_with_every_field() -> None:
    payload, _ = encode(LEASE)
    assert msgspec.json.decode(payload) == {
        "schema": 2,
        "node": "gpu-07",
        "session": "d9eab6f1c983",
        "host": "gpu-07.rack4",
        "pid": 48121,
        "started": "2026-11-30T06:00:00Z",
        "interval_s": 2.0,
    }


def test_a_lease_expires_three_of_its_holders_intervals_after_the_server_stored_it() -> None:
    assert LEASE_INTERVALS == 3
    assert LEASE.expires(STORED) == STORED + seconds(6)
    holder = holder_of(7, STORED, encode(LEASE)[0], None)
    assert holder == Holder(7, STORED, LEASE, size=len(encode(LEASE)[0]))
    assert holder.expires(own_interval_s=0.3) == STORED + seconds(6)  # the holder's, not ours
    assert holder.live(STORED + seconds(5.999), 0.3)
    assert not holder.live(STORED + seconds(6), 0.3)
    assert not holder.live(STORED + seconds(60), 0.3)


def test_a_clock_behind_the_servers_sees_a_fresh_lease_as_live() -> None:
    holder = holder_of(7, STORED, encode(LEASE)[0], None)
    assert holder.live(STORED - seconds(30), 2.0)


def test_the_started_time_written_by_the_holder_does_not_enter_expiry() -> None:
    old = msgspec.structs.replace(LEASE, started=STORED - timedelta(days=400))
    assert holder_of(7, STORED, encode(old)[0], None).live(STORED + seconds(1), 2.0)


@pytest.mark.parametrize(
    "headers",
    [{"KV-Operation": "DEL"}, {"KV-Operation": "PURGE"}, {"Nats-Marker-Reason": "MaxAge"}],
)
def test_a_deleted_purged_or_expired_key_holds_no_lease(headers: dict[str, str]) -> None:
    holder = holder_of(9, STORED, None, headers)
    assert (holder.deleted, holder.lease, holder.revision) == (True, None, 9)
    assert not holder.live(STORED, 2.0)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"not json",
        b'{"node": "gpu-07"}',
        b"[1, 2]",
        encode(msgspec.structs.replace(LEASE, interval_s=2.0))[0].replace(b"2.0", b"0.0"),
        encode(LEASE)[0].replace(b'"interval_s":2.0', b'"interval_s":1e9'),
        encode(LEASE)[0].replace(b'"pid":48121', b'"pid":0'),
        encode(LEASE)[0].replace(b'"schema":2', b'"schema":99'),
    ],
    ids=["empty", "text", "partial", "array", "zero-interval", "huge-interval", "pid-0", "newer"],
)
def test_a_value_that_is_not_a_lease_expires_after_three_of_the_readers_intervals(
    value: bytes,
) -> None:
    holder = holder_of(4, STORED, value, None)
    assert (holder.lease, holder.deleted, holder.size) == (None, False, len(value))
    assert holder.expires(own_interval_s=0.5) == STORED + seconds(1.5)
    assert holder.live(STORED + seconds(1.4), 0.5)
    assert not holder.live(STORED + seconds(1.5), 0.5)
    assert holder.who() == f"a value that is not a placewatch lease ({len(value)} bytes)"


def test_a_held_lease_is_told_with_its_holder_its_age_and_what_to_do() -> None:
    holder = holder_of(7, STORED, encode(LEASE)[0], None)
    said = held_message("gpu-07", holder, STORED + seconds(0.4), 0.3)
    assert said == (
        "node gpu-07 is held by another live worker: host gpu-07.rack4, pid 48121, session "
        "d9eab6f1c983; its lease was refreshed 0.4 s ago (every 2 s) and expires in 5.6 s "
        "unless refreshed again. Stop it, or start this one with --takeover "
        "(PLACEWATCH_TAKEOVER=true) to take the node from it; if the two watch different "
        "nodes, give each its own --node"
    )


def test_a_value_that_is_not_a_lease_is_told_as_such_with_how_long_it_holds_the_node() -> None:
    holder = holder_of(3, STORED, b"hello", None)
    assert held_message("gpu-07", holder, STORED + seconds(0.5), 0.5) == (
        "node gpu-07's lease key holds a value that is not a placewatch lease (5 bytes), written "
        "0.5 s ago: it counts as held for 1.0 s more (3 of this worker's intervals). Start this "
        "one again then, or start this one with --takeover (PLACEWATCH_TAKEOVER=true) to write "
        "over it"
    )


def test_a_held_lease_seen_through_a_clock_behind_says_no_negative_age() -> None:
    holder = holder_of(7, STORED, encode(LEASE)[0], None)
    said = held_message("gpu-07", holder, STORED - seconds(3), 0.3)
    assert "refreshed 0.0 s ago (every 2 s) and expires in 9.0 s" in said


def test_a_lost_lease_names_the_worker_that_took_it() -> None:
    holder = holder_of(8, STORED, encode(LEASE)[0], None)
    assert lost_message("gpu-07", holder) == (
        "node gpu-07 was taken over by another worker: host gpu-07.rack4, pid 48121, session "
        "d9eab6f1c983 (started with --takeover, or this worker's lease went 3 intervals "
        "unrefreshed); this worker stops publishing for it. Stop one of the two; if the two "
        "watch different nodes, give each its own --node"
    )
