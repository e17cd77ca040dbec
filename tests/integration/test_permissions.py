"""The node permissions docs/operations.md gives, on a real server, for two nodes: node A's
worker does its job with them, and every way node A could read node B's placements, compute
statuses and lease is tried and fails, while A still reads and writes its own; what A may
publish about B on its own subjects, the readers refuse."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from placewatch.consumer import FleetView
from placewatch.schemas import (
    ComputeStatus,
    FallbackEvent,
    NodeTelemetry,
    encode,
    partitions,
    subjects,
)
from placewatch.schemas import streams as contract
from placewatch.worker.bus.kvfollow import Values, follow
from placewatch.worker.bus.outbox import EventOutbox

from tests.conftest import ROOT, NatsServer, Worker, clean_env, run_placewatch, start
from tests.integration.test_security import create_streams_as_admin
from tests.support.eventually import eventually_async
from tests.support.intruder import REFUSED, Intruder

A, B = "gpu-07", "gpu-08"
N = 4
"""Partitions, where the servers map the telemetry."""
SECRET = "s3cret-of-gpu-08"
B_PLACEMENT = {
    "id": "llama",
    "pid": 1,
    "gpus": [0],
    "health_url": f"http://ops:{SECRET}@127.0.0.1:9/health?token={SECRET}",
}
KEYS = {  # bucket: (B's key, A's filter, B's filter), as the worker and the lease use them
    contract.PLACEMENTS.name: (f"{B}.llama", f"{A}.>", f"{B}.>"),
    contract.COMPUTE.name: (f"{B}.llama", f"{A}.>", f"{B}.>"),
    contract.LEASES.name: (B, A, B),
}


def two_nodes() -> str:
    """The documented permission block with one user per node, and an admin."""
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"<!-- node-permissions -->\s*```\n(.*?)```", doc, re.S)
    assert block, "docs/operations.md lost its node-permissions block"
    user = re.search(r"    \{user: NODE.*?\n    \}\}\n", block.group(1), re.S)
    assert user
    users = "".join(
        user.group(0).replace("$NODE_PASSWORD", f"{n}pw").replace("NODE", n) for n in (A, B)
    )
    return (
        f"authorization {{\n  users = [\n    {{user: admin, password: adminpw}}\n{users}  ]\n}}\n"
    )


async def write_as_control_plane(url: str, a_pid: int) -> None:
    """A's placement, and B's placement, status and lease, each with B's secret in it."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        js = nc.jetstream()
        placements = await js.key_value(contract.PLACEMENTS.name)
        await placements.put(f"{A}.mine", json.dumps({"id": "mine", "pid": a_pid}).encode())
        await placements.put(f"{B}.llama", json.dumps(B_PLACEMENT).encode())
        status = ComputeStatus(
            node=B, shard="llama", session="s", time=datetime.now(UTC), reason=SECRET
        )
        await (await js.key_value(contract.COMPUTE.name)).put(f"{B}.llama", encode(status)[0])
        await (await js.key_value(contract.LEASES.name)).put(B, f"lease {SECRET}".encode())
        # A control plane's own reader, which a node could try to pull from.
        await js.add_consumer(
            contract.PLACEMENTS.stream,
            ConsumerConfig(durable_name="controller", ack_policy=AckPolicy.EXPLICIT),
        )
    finally:
        await nc.close()


async def wait_for_a_at_work(url: str) -> list[str]:
    """A's status in the compute bucket, its telemetry kept, its service answering."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        js = nc.jetstream()
        compute = await js.key_value(contract.COMPUTE.name)
        with anyio.fail_after(15):
            while True:
                try:
                    await compute.get(f"{A}.mine")
                    break
                except nats.js.errors.KeyNotFoundError:
                    await anyio.sleep(0.2)
            while not (await js.stream_info(contract.TELEMETRY.name)).state.messages:
                await anyio.sleep(0.2)
        reply = await nc.request(f"{subjects.service(A)}.shards", b"", timeout=3)
        return [s["shard"] for s in json.loads(reply.data)]
    finally:
        await nc.close()


async def telemetry_kept(url: str) -> list[str]:
    """The subjects the telemetry stream holds."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        info = await nc.jetstream().stream_info(contract.TELEMETRY.name, subjects_filter=">")
        return sorted(info.state.subjects or {})
    finally:
        await nc.close()


def create(stream: str, name: str, inbox: str, **config: Any) -> dict[str, Any]:
    """A consumer create request's body."""
    return {
        "stream_name": stream,
        "config": {"name": name, "deliver_subject": f"{inbox}.deliver", "ack_policy": "none"}
        | config,
    }


async def consumer_creates(me: Intruder, bucket: str) -> None:
    """Every form of consumer create, with B's keys as the filter or none."""
    _, mine, theirs = KEYS[bucket]
    stream, prefix = subjects.kv_stream(bucket), subjects.kv_prefix(bucket)
    api = f"$JS.API.CONSUMER.CREATE.{stream}"
    b_filter, a_filter = f"{prefix}{theirs}", f"{prefix}{mine}"
    body = create(stream, "x", me.inbox, filter_subject=b_filter)
    await me.ask(f"{bucket}: create, filtered, B's filter", f"{api}.x.{b_filter}", body)
    await me.ask(f"{bucket}: create, unfiltered form", api, body)
    durable = create(stream, "d", me.inbox, durable_name="d", filter_subject=b_filter)
    await me.ask(
        f"{bucket}: create, durable form", f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.d", durable
    )
    for wild in (">", f"{prefix}>"):
        body = create(stream, "w", me.inbox, filter_subject=wild)
        await me.ask(f"{bucket}: create, filter {wild}", f"{api}.w.{wild}", body)
    # A's own filter in the subject, another in the body: the server holds them to match.
    await me.ask(
        f"{bucket}: create, A's subject, B's filter in the body",
        f"{api}.y.{a_filter}",
        create(stream, "y", me.inbox, filter_subject=b_filter),
    )
    await me.ask(
        f"{bucket}: create, A's subject, no filter in the body",
        f"{api}.z.{a_filter}",
        create(stream, "z", me.inbox),
    )
    many = create(stream, "m", me.inbox, filter_subjects=[a_filter, b_filter])
    await me.ask(
        f"{bucket}: create, A's subject, B's among filter_subjects", f"{api}.m.{a_filter}", many
    )


async def gets(me: Intruder, bucket: str) -> None:
    """Message gets and nats-py's KV reads of B's keys."""
    key, mine, theirs = KEYS[bucket]
    stream, prefix = subjects.kv_stream(bucket), subjects.kv_prefix(bucket)
    last = {"last_by_subj": f"{prefix}{key}"}
    await me.ask(f"{bucket}: STREAM.MSG.GET", f"$JS.API.STREAM.MSG.GET.{stream}", last)
    await me.ask(f"{bucket}: DIRECT.GET by subject", f"$JS.API.DIRECT.GET.{stream}.{prefix}{key}")
    await me.ask(f"{bucket}: DIRECT.GET with a body", f"$JS.API.DIRECT.GET.{stream}", last)
    if bucket == contract.LEASES.name:
        own = f"$JS.API.DIRECT.GET.{stream}.{prefix}{mine}"
        await me.ask(f"{bucket}: DIRECT.GET of A's key, a body naming B's", own, last)
    await me.ask(
        f"{bucket}: pull from another's consumer",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.controller",
        {"batch": 10},
    )
    await me.ask(f"{bucket}: list consumers", f"$JS.API.CONSUMER.LIST.{stream}", {})
    kv = await me.nc.jetstream(timeout=0.5).key_value(bucket)
    direct = f"$JS.API.DIRECT.GET.{stream}.{prefix}{key}"
    await me.call(f"{bucket}: kv.get(B's key)", direct, lambda: kv.get(key))
    await me.call(f"{bucket}: kv.keys()", f"$JS.API.CONSUMER.CREATE.{stream}", kv.keys)
    await me.call(f"{bucket}: kv.watchall()", f"$JS.API.CONSUMER.CREATE.{stream}", kv.watchall)
    await me.subscribe(f"{bucket}: subscribe to B's keys", f"{prefix}{theirs}")


async def own_keys(url: str) -> tuple[Values, list[str], Values]:
    """What A reads of its own with its credentials: placements, statuses, lease."""
    nc = await nats.connect(url, user=A, password=f"{A}pw", inbox_prefix=subjects.inbox(A))
    try:
        placements: Values = {}
        await follow(
            nc, contract.PLACEMENTS.name, f"{A}.>", heartbeat=1.0, latest=placements.update
        )
        statuses = [s.shard for s in await EventOutbox(nc).previous(A)]
        leases = await nc.jetstream().key_value(contract.LEASES.name)
        revision = await leases.put(A, b"held")
        await leases.update(A, b"held again", last=revision)
        assert (await leases.get(A)).value == b"held again"  # a direct get by its subject
        lease: Values = {}
        await follow(nc, contract.LEASES.name, A, heartbeat=1.0, latest=lease.update)
        return placements, statuses, lease
    finally:
        await nc.close()


async def intrude(url: str, partitioned: bool) -> Intruder:
    me = await Intruder.connect(url, A, f"{A}pw")
    try:
        for bucket in KEYS:
            await consumer_creates(me, bucket)
            await gets(me, bucket)
        await me.subscribe("subscribe to $KV.>", "$KV.>")
        await me.subscribe("subscribe to >", ">")
        await me.subscribe("subscribe to every inbox", "_INBOX.>")
        info = f"$JS.API.STREAM.INFO.{contract.PLACEMENTS.stream}"
        await me.ask(
            "placements: STREAM.INFO with a subject filter", info, {"subjects_filter": ">"}
        )
        await me.publish("write B's status", f"$KV.placewatch_compute.{B}.llama", b"{}")
        await me.publish("write B's lease", f"$KV.placewatch_leases.{B}", b"mine now")
        as_b = partitions.mapped("telemetry", B, N)
        await me.publish(
            "publish as B", subjects.telemetry(B), b"{}", checked_as=as_b if partitioned else None
        )
        await me.publish("publish as B, straight into its partition", as_b, b"{}")
        # Tokens after its own: subjects whose last tokens are B's and its shard's.
        await me.publish(
            "fire B's fallback past A's token", f"placewatch.fallback.{A}.{B}.llama", b"{}"
        )
        await me.publish("B's status past A's token", f"placewatch.compute.{A}.{B}.llama", b"{}")
        await me.publish("B's status past A's key", f"$KV.placewatch_compute.{A}.{B}.llama", b"{}")
        own = f"$KV.placewatch_compute.{A}.mine"
        rollup = {"Nats-Rollup": "all"}
        await me.call(
            "roll up the compute bucket from A's key",
            own,
            lambda: me.nc.jetstream(timeout=0.5).publish(own, b"{}", headers=rollup),
        )
        await nudge_as_admin(url)  # B's keys change: a taken subscription would get them
        await anyio.sleep(0.3)
    finally:
        await me.nc.close()
    return me


async def nudge_as_admin(url: str) -> dict[str, bytes]:
    """B's values written again, then read back: what A tried to change of them."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        js = nc.jetstream()
        found = {}
        for bucket, (key, _, _) in KEYS.items():
            kv = await js.key_value(bucket)
            value = (await kv.get(key)).value or b""
            await kv.put(key, value)
            found[bucket] = value
        return found
    finally:
        await nc.close()


EXPECTED = {
    "create, A's subject, B's filter in the body": (
        "refused: 10131 Consumer create request did not match filtered subject from create subject"
    ),
    "create, A's subject, no filter in the body": (
        "refused: 10131 Consumer create request did not match filtered subject from create subject"
    ),
    "create, A's subject, B's among filter_subjects": (
        "refused: 10137 consumer with multiple subject filters cannot use subject based API"
    ),
    "DIRECT.GET of A's key, a body naming B's": "refused: 408 Bad Request",
    "roll up the compute bucket from A's key": "failed (nats: ServerError: code=500 "
    "err_code=10111 description='rollup not permitted')",
}
"""The tries the server itself turns down; every other is refused by the permissions."""


@pytest.mark.parametrize("partitioned", [False, True], ids=["unmapped", "partitioned"])
def test_a_node_reaches_its_own_keys_and_none_of_another_nodes(
    tmp_path: Path,
    workers: list[Worker],
    shard_procs: dict[str, subprocess.Popen[bytes]],
    partitioned: bool,
) -> None:
    """With and without the servers' partition mapping (docs/operations.md, Partitions), which
    the servers apply before they check a publish."""
    mapping = partitions.server_config(subjects.DEFAULT_PREFIX, N) if partitioned else ""
    server = NatsServer(tmp_path / "js", config=mapping + two_nodes())
    server.start()
    try:
        anyio.run(create_streams_as_admin, server.url, backend="asyncio")
        anyio.run(write_as_control_plane, server.url, start(shard_procs, "mine"))
        env = clean_env() | {
            "PLACEWATCH_USER": A,
            "PLACEWATCH_PASSWORD": f"{A}pw",
            "PLACEWATCH_CREATE": "false",
        }
        worker = Worker(
            "--nats", server.url, "--node", A, "--interval", "1", "--no-discover", env=env
        )
        workers.append(worker)
        assert anyio.run(wait_for_a_at_work, server.url, backend="asyncio") == ["mine"]
        # Its own credentials may ask its own worker's health, and not another node's.
        own = run_placewatch("health", "--nats", server.url, "--node", A, env=env)
        assert own.returncode == 0, own.stdout + own.stderr
        other = run_placewatch(
            "health", "--nats", server.url, "--node", B, "--timeout", "1", env=env
        )
        assert other.returncode == 1
        assert other.stdout.startswith(f"unhealthy: node {B}'s worker did not answer"), other
        code, _, _, err = worker.stop()
        assert code == 0
        assert "following KV placewatch_placements for placements gpu-07.>" in err
        assert "refused" not in err.lower() and "violation" not in err.lower(), err

        kept = anyio.run(telemetry_kept, server.url, backend="asyncio")
        me = anyio.run(intrude, server.url, partitioned, backend="asyncio")
        after = anyio.run(nudge_as_admin, server.url, backend="asyncio")
        placements, statuses, lease = anyio.run(own_keys, server.url, backend="asyncio")
    finally:
        server.stop()

    info = me.outcomes.pop("placements: STREAM.INFO with a subject filter")
    for label, outcome in me.outcomes.items():
        expected = next((e for k, e in EXPECTED.items() if label.endswith(k)), REFUSED)
        assert outcome == expected, label
    # 17 tries a bucket, one more on the leases, 3 subscriptions, 7 writes, the rollup.
    assert len(me.outcomes) == 3 * 17 + 1 + 3 + 7 + 1
    # A's telemetry was kept, under the subject the servers gave it.
    assert kept == [partitions.mapped("telemetry", A, N) if partitioned else subjects.telemetry(A)]
    # Stream info, which a node needs to find the buckets, names the keys it holds, with
    # counts: which nodes and shards exist. Never a value.
    held = json.loads(info.removeprefix("answered: "))["state"]["subjects"]
    assert held == {
        "$KV.placewatch_placements.gpu-07.mine": 1,
        "$KV.placewatch_placements.gpu-08.llama": 1,
    }
    assert not any(SECRET.encode() in m for m in me.received)
    assert not any(SECRET in outcome for outcome in me.outcomes.values())
    # B's values are as the control plane wrote them.
    assert SECRET.encode() in after[contract.COMPUTE.name]
    assert after[contract.LEASES.name] == f"lease {SECRET}".encode()
    # And A reads and writes its own.
    assert list(placements) == [f"{A}.mine"]
    assert statuses == ["mine"]
    assert lease == {A: b"held again"}


def test_the_nsc_command_allows_what_the_configuration_block_allows() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"<!-- node-permissions -->\s*```\n(.*?)```", doc, re.S)
    nsc = re.search(r"nsc add user --account PLACEWATCH --name NODE(.*?)\nnsc generate", doc, re.S)
    assert block and nsc
    allows = re.search(
        r"publish: \{\s*allow: \[(.*?)\]\s*\}\s*subscribe: \{\s*allow: \[(.*?)\]",
        block.group(1),
        re.S,
    )
    assert allows
    publish, subscribe = allows.groups()

    def named(flag: str) -> set[str]:
        return {s for v in re.findall(rf"{flag} '([^']*)'", nsc.group(1)) for s in v.split(",")}

    assert named("--allow-pub") == set(re.findall(r'"([^"]+)"', publish))
    assert named("--allow-sub") == set(re.findall(r'"([^"]+)"', subscribe))


def test_what_a_node_may_publish_about_another_node_no_view_takes(tmp_path: Path) -> None:
    """Node A's own subjects and keys take any content: a telemetry, an event and a status
    there that name node B pass the permissions, and a view refuses each of them."""
    server = NatsServer(tmp_path / "js", config=two_nodes())
    server.start()
    when = datetime.now(UTC)
    as_b = NodeTelemetry(node=B, session="s", seq=1, time=when, interval_s=1, inventory="i")
    status = ComputeStatus(node=B, shard="llama", session="s", time=when, verdict="cpu_fallback")
    refused: list[Exception] = []

    async def error(exc: Exception) -> None:
        refused.append(exc)

    async def scenario() -> None:
        await create_streams_as_admin(server.url)
        admin = await nats.connect(server.url, user="admin", password="adminpw")
        view = FleetView(admin)
        a = await nats.connect(
            server.url, user=A, password=f"{A}pw", error_cb=error, inbox_prefix=subjects.inbox(A)
        )
        try:
            await view.start()
            for subject, message in (
                (subjects.telemetry(A), as_b),
                (subjects.compute(A, "llama"), status),
                (subjects.fallback(A, "llama"), FallbackEvent(state="firing", status=status)),
            ):
                data, headers = encode(message)
                await a.publish(subject, data, headers=headers)
            kv = await a.jetstream().key_value(contract.COMPUTE.name)
            await kv.put(subjects.shard_key(A, "llama"), encode(status)[0])
            await a.flush()
            await eventually_async(lambda: view.impostors.count == 3)
            late = FleetView(admin)  # reads the stream's copy and A's key, which name B
            await late.start()
            await late.stop()
            assert (late.nodes, late.shards) == ({}, {})
            assert late.impostors.by_subject == {
                subjects.telemetry(A): 1,
                subjects.kv_subject(contract.COMPUTE.name, subjects.shard_key(A, "llama")): 1,
            }
        finally:
            await view.stop()
            await a.close()
            await admin.close()
        assert (view.nodes, view.shards) == ({}, {})
        assert sorted(view.impostors.by_subject) == [
            subjects.compute(A, "llama"),
            subjects.fallback(A, "llama"),
            subjects.telemetry(A),
        ]

    try:
        anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()
    assert refused == []  # the server let every one of them through: the readers refused them
