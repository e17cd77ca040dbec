"""One firing per fallback, whatever the lease does: a real worker, a real nats-server with
JetStream, real processes as shards (tests/support/fleet_node.py: shard `idle` fires). The
lease tests run the worker with a node's own credentials, as docs/operations.md gives them:
what it reads to decide, a node may read."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import pytest

from placewatch.schemas import subjects
from placewatch.schemas.streams import LEASES

from tests.conftest import FakeGpuTools, NatsServer, Worker, clean_env, run_placewatch
from tests.integration.test_security import create_streams_as_admin, node_permissions
from tests.support.eventually import eventually
from tests.support.fleet_node import NODE, ShardNode, fallback_events, wait_fallback_events
from tests.support.natsproto import RawSubscriber

ADMIN = {"PLACEWATCH_USER": "admin", "PLACEWATCH_PASSWORD": "adminpw"}
AS_NODE = {"PLACEWATCH_USER": NODE, "PLACEWATCH_PASSWORD": "n1pw", "PLACEWATCH_CREATE": "false"}


@pytest.fixture
def node(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> ShardNode:
    return ShardNode(nats_server.url, fake_gpu, shard_procs, workers, tmp_path)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[NatsServer]:
    """A server whose users are an operator (admin) and node n1 with the documented rights."""
    server = NatsServer(tmp_path / "guarded", config=node_permissions(NODE, "n1pw"))
    server.start()
    anyio.run(create_streams_as_admin, server.url, backend="asyncio")
    yield server
    server.stop()


@pytest.fixture
def guarded_node(
    guarded: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> ShardNode:
    """The node on `guarded`: the test reads as the operator, the worker runs as the node."""
    admin = guarded.url.replace("nats://", "nats://admin:adminpw@")
    return ShardNode(admin, fake_gpu, shard_procs, workers, tmp_path)


def node_worker(node: ShardNode, server: NatsServer) -> Worker:
    """`node`'s worker with the node's own credentials."""
    args = list(node.args)
    args[args.index("--nats") + 1] = server.url
    worker = Worker(*args, env=node.fake_gpu.env(clean_env() | AS_NODE))
    node.workers.append(worker)
    node.worker = worker
    return worker


def idle_firings(url: str) -> list[tuple[str, str]]:
    """Shard `idle`'s fallback events in the stream: (state, session)."""
    found = anyio.run(fallback_events, url, backend="asyncio")
    return [(e.state, e.status.session) for e in found if e.status.shard == "idle"]


def ticks(url: str, count: int) -> None:
    """Until `count` more of the node's telemetry messages went out (read as the operator,
    where the server has users)."""
    admin = {"user": "admin", "pass": "adminpw"} if "admin:" in url else {}
    plain = url.replace("admin:adminpw@", "")
    with RawSubscriber(plain, subjects.telemetry(NODE), connect_extra=admin) as sub:
        for _ in range(count):
            sub.next(timeout=10)


async def delete_lease(url: str) -> None:
    async with await nats.connect(url) as nc:
        kv = await nc.jetstream().key_value(LEASES.name)
        await kv.delete(subjects.lease_key(NODE))


def test_a_lease_deleted_by_hand_fires_nothing_again(
    guarded_node: ShardNode, guarded: NatsServer
) -> None:
    node, url = guarded_node, guarded_node.url
    worker = node_worker(node, guarded)
    node.wait_published()
    (first,) = wait_fallback_events(url, 1)
    anyio.run(delete_lease, url, backend="asyncio")
    worker.wait_for(f"node {NODE}'s lease was removed while this worker held it")
    ticks(url, 4)  # the tick that answers the removal, and more
    assert idle_firings(url) == [("firing", first.status.session)]
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert "stored again" not in err  # the bus lacked nothing
    assert "refused" not in err  # what it read to decide, its credentials allow


def test_a_fallback_forget_resolved_while_the_worker_was_cut_off_fires_again(
    guarded_node: ShardNode, guarded: NatsServer
) -> None:
    node, url = guarded_node, guarded_node.url
    worker = node_worker(node, guarded)
    node.wait_published()
    wait_fallback_events(url, 1)
    os.kill(worker.proc.pid, signal.SIGSTOP)  # cut off: its lease expires
    try:
        forgot: list[str] = []

        def forgotten() -> bool:
            done = run_placewatch("forget", NODE, "--nats", guarded.url, env=clean_env() | ADMIN)
            forgot.append(done.stderr)
            return done.returncode == 0

        eventually(forgotten, 20, every=0.5, what="forget, once the lease expired")
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    node.wait_published()  # both statuses in the bucket again, `idle` still cpu_fallback
    events = wait_fallback_events(url, 3)
    assert [(e.state, e.status.verdict) for e in events if e.status.shard == "idle"] == [
        ("firing", "cpu_fallback"),
        ("resolved", "gone"),  # forget's
        ("firing", "cpu_fallback"),  # the same worker's, again: resolved in between
    ]
    assert events[0].status.session == events[2].status.session
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert "the node's lease was removed: 3 statuses and fallback events stored again" in err
    assert "refused" not in err


def test_a_restart_fires_nothing_again(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    (first,) = node.wait_fallback_events(1)
    node.stop()
    worker = node.start()
    node.wait_published()
    ticks(node.url, 3)
    assert [state for state, _ in idle_firings(node.url)] == ["firing"]
    assert idle_firings(node.url)[0][1] == first.status.session
    code, _, _, err = worker.stop()
    assert code == 0, err


def test_a_restart_after_forget_fires_again(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    node.wait_fallback_events(1)
    node.stop()
    done = run_placewatch("forget", NODE, "--nats", node.url)
    assert done.returncode == 0, done.stderr
    worker = node.start()
    node.wait_published()
    events = node.wait_fallback_events(3)
    assert [(e.state, e.status.verdict, e.status.shard) for e in events] == [
        ("firing", "cpu_fallback", "idle"),
        ("resolved", "gone", "idle"),  # forget's
        ("firing", "cpu_fallback", "idle"),  # resolved in between: a new page is right
    ]
    assert events[0].status.session != events[2].status.session
    code, _, _, err = worker.stop()
    assert code == 0, err
