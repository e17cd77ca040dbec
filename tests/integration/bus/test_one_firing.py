"""One firing per fallback, whatever the lease does: a real worker, a real nats-server with
JetStream, real processes as shards (tests/support/fleet_node.py: shard `idle` fires)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import nats
import pytest

from placewatch.schemas import subjects
from placewatch.schemas.streams import COMPUTE, LEASES

from tests.conftest import FakeGpuTools, NatsServer, Worker, run_placewatch
from tests.support.fleet_node import NODE, ShardNode, fallback_events, wait_fallback_events
from tests.support.natsproto import RawSubscriber


@pytest.fixture
def node(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> ShardNode:
    return ShardNode(nats_server.url, fake_gpu, shard_procs, workers, tmp_path)


def idle_events(url: str) -> list[tuple[str, str]]:
    """Shard `idle`'s fallback events in the stream: (state, session)."""
    found = anyio.run(fallback_events, url, backend="asyncio")
    return [(e.state, e.status.session) for e in found if e.status.shard == "idle"]


def ticks(url: str, count: int) -> None:
    """Until `count` more of the node's telemetry messages went out."""
    with RawSubscriber(url, subjects.telemetry(NODE)) as sub:
        for _ in range(count):
            sub.next(timeout=10)


async def delete_key(url: str, bucket: str, key: str) -> None:
    async with await nats.connect(url) as nc:
        kv = await nc.jetstream().key_value(bucket)
        await kv.delete(key)


def test_a_lease_deleted_by_hand_fires_nothing_again(node: ShardNode) -> None:
    worker = node.start()
    node.wait_published()
    (first,) = wait_fallback_events(node.url, 1)
    assert first.state == "firing"
    anyio.run(delete_key, node.url, LEASES.name, subjects.lease_key(NODE), backend="asyncio")
    worker.wait_for(f"node {NODE}'s lease was removed while this worker held it")
    ticks(node.url, 4)  # the tick that answers the removal, and more
    assert idle_events(node.url) == [("firing", first.status.session)]
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert "statuses and fallback events stored again" not in err  # the bus lacked nothing


def test_a_restart_after_the_bucket_lost_its_status_fires_nothing_again(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    wait_fallback_events(node.url, 1)
    node.stop()
    # The compute bucket no longer says what was said (a key deleted, a worker stopped
    # between the event and its status): the stream's last event decides.
    anyio.run(
        delete_key, node.url, COMPUTE.name, subjects.shard_key(NODE, "idle"), backend="asyncio"
    )
    worker = node.start()
    node.wait_published()
    ticks(node.url, 3)
    assert [state for state, _ in idle_events(node.url)] == ["firing"]
    code, _, _, err = worker.stop()
    assert code == 0, err


def test_a_restart_after_forget_fires_again(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    wait_fallback_events(node.url, 1)
    node.stop()
    done = run_placewatch("forget", NODE, "--nats", node.url)
    assert done.returncode == 0, done.stderr
    worker = node.start()
    node.wait_published()
    events = wait_fallback_events(node.url, 3)
    assert [(e.state, e.status.verdict, e.status.shard) for e in events] == [
        ("firing", "cpu_fallback", "idle"),
        ("resolved", "gone", "idle"),  # forget's
        ("firing", "cpu_fallback", "idle"),  # resolved in between: a new page is right
    ]
    assert events[0].status.session != events[2].status.session
    code, _, _, err = worker.stop()
    assert code == 0, err
