"""FleetView: a gateway that starts late knows the fleet at once, then follows it live."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import msgspec
import nats
import nats.errors
from nats.aio.client import Client

from placewatch.consumer import FiringFallback, FleetView, Message
from placewatch.retained import kv_headers, last_per_subject, stored_at
from placewatch.schemas import ComputeStatus, NodeTelemetry, encode, lean, subjects
from placewatch.schemas.service import endpoint
from placewatch.schemas.streams import COMPUTE, EVENTS, INVENTORY, TELEMETRY
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream

from tests.conftest import ROOT, FakeGpuTools, NatsServer, Worker
from tests.support.eventually import eventually_async
from tests.support.fleet_node import HOLDING_MIB, NODE, ShardNode
from tests.support.held import node_sample

MIB = 1 << 20


def test_consumer_package_imports_only_the_contract_and_nats() -> None:
    code = "import sys, placewatch.consumer; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = set(out.stdout.split())
    ours = {m for m in imported if m.split(".")[0] == "placewatch"}
    assert ours <= {"placewatch"} | {m for m in ours if m.startswith("placewatch.schemas")} | {
        "placewatch.consumer",
        "placewatch.consumer.capacity",
        "placewatch.consumer.fleet",
        "placewatch.consumer.held",
        "placewatch.consumer.impostors",
        "placewatch.consumer.kept",
        "placewatch.consumer.mapping",
        "placewatch.retained",
        "placewatch.consumer.snapshot",
        "placewatch.consumer.unreadable",
    }
    assert "nats" in imported
    assert {"anyio", "psutil", "placewatch.worker.bus", "placewatch.worker.runtime"}.isdisjoint(
        imported
    )


def test_a_gateway_that_starts_late_knows_the_fleet_at_once_then_follows_it(
    node: ShardNode,
) -> None:
    node.start()
    node.wait_published()
    node.stop()  # nothing live from here on: what the view knows came from the stream and bucket

    async def scenario() -> None:
        nc = await nats.connect(node.url)
        seen: list[Message] = []
        view = FleetView(nc, on_change=seen.append)
        try:
            await view.start()
            t = view.sample(NODE)
            assert t is not None
            first_session = t.session
            assert [(g.index, g.name) for g in t.gpus] == [
                (0, "NVIDIA A100-SXM4-80GB"),
                (1, "NVIDIA A100-SXM4-80GB"),
            ]
            assert [g.memory_free_bytes for g in t.gpus] == [40405 * MIB, 81365 * MIB]
            assert t.gpus[0].foreign_bytes == (40960 - HOLDING_MIB) * MIB
            assert {b.shard: (b.verdict, b.pid) for b in t.shards} == {
                "holding": ("gpu", node.holding),
                "idle": ("cpu_fallback", node.idle),
            }  # pids from the statuses
            held = view.telemetry(NODE)
            assert held is not None and held.inventory == t.inventory
            inventory = view.inventory(NODE)
            assert inventory is not None and inventory.id == t.inventory
            assert inventory.gpus[0].uuid == t.gpus[0].uuid
            kept = view.inventories[NODE]  # held compressed, as it came
            assert kept.compressed and len(kept.data) < len(encode(inventory)[0])
            holding, idle = view.status(NODE, "holding"), view.status(NODE, "idle")
            assert holding is not None and holding.verdict == "gpu"
            assert idle is not None and idle.verdict == "cpu_fallback"
            assert idle.placed_gpus == [1] and idle.pid == node.idle
            (firing,) = view.firing()
            assert (firing.node, firing.shard, firing.verdict) == (NODE, "idle", "cpu_fallback")
            assert firing.reason.startswith("placed on GPU 1 but computing on the CPU")
            assert view.undecodable == 0
            assert len(seen) == 4  # an inventory, a telemetry, two statuses

            # The worker comes back, and the idle shard starts computing on its GPU.
            await anyio.to_thread.run_sync(node.start)
            await eventually_async(
                lambda: (t := view.telemetry(NODE)) is not None and t.session != first_session
            )
            node.idle_on_gpu(True)
            await eventually_async(
                lambda: getattr(view.status(NODE, "idle"), "verdict", None) == "gpu"
            )
            assert view.firing() == []
            assert any(isinstance(m, ComputeStatus) and m.verdict == "gpu" for m in seen)
            fleet = view.snapshot()
            assert [t.node for t in fleet.nodes] == [NODE]
            assert [(s.shard, s.verdict) for s in fleet.shards] == [
                ("holding", "gpu"),
                ("idle", "gpu"),
            ]
        finally:
            await view.stop()
            await nc.close()

    anyio.run(scenario, backend="asyncio")
    node.stop()


def test_a_view_of_one_look_holds_what_the_bus_keeps_until_told_to_follow(
    node: ShardNode,
) -> None:
    node.start()
    node.wait_published()
    node.stop()
    when = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    status = ComputeStatus(
        node=NODE, shard="later", session="s1", time=when, verdict="partial", reason="half"
    )

    async def scenario() -> None:
        nc = await nats.connect(node.url)
        view = FleetView(nc, follow=False)
        try:
            await view.start()
            assert view.kept is not None and view.kept.nodes == {NODE}
            assert {shard for _, shard in view.shards} == {"holding", "idle"}
            inventory = view.inventories[NODE]
            assert not inventory.compressed  # held as it came, for the moment it lives
            assert view.sample(NODE) is not None
            payload, headers = encode(status)
            subject = subjects.compute(NODE, "later")
            probe = await nc.subscribe(subject)  # made after the view's would be
            await nc.publish(subject, payload, headers=headers)
            await probe.next_msg(timeout=10)
            assert view.status(NODE, "later") is None  # not followed
            await view.follow_live()
            await nc.publish(subject, payload, headers=headers)
            await nc.flush()
            await eventually_async(lambda: view.status(NODE, "later") == status)
        finally:
            await view.stop()
            await nc.close()

    anyio.run(scenario, backend="asyncio")


def test_a_fresh_cluster_is_an_empty_fleet_and_bad_messages_are_counted(
    nats_server: NatsServer,
) -> None:
    when = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    status = ComputeStatus(
        node="gpu 7", shard="llama", session="s1", time=when, verdict="partial", reason="half"
    )

    async def scenario() -> None:
        nc = await nats.connect(nats_server.url)
        view = FleetView(nc)
        try:
            await view.start()  # no stream, no bucket yet
            assert view.snapshot().nodes == [] and view.shards == {}
            payload, headers = encode(status, "msgpack")
            await nc.publish(subjects.compute("gpu 7", "llama"), payload, headers=headers)
            await nc.publish(subjects.telemetry("gpu 7"), b"{not json")
            await nc.publish(subjects.compute("gpu 7", "llama"), b"[]")
            await nc.flush()
            await eventually_async(lambda: view.undecodable == 2)
            assert view.status("gpu 7", "llama") == status
            assert view.firing() == [
                FiringFallback(
                    node="gpu 7", shard="llama", verdict="partial", since=when, reason="half"
                )
            ]
        finally:
            await view.stop()
            await nc.close()

    anyio.run(scenario, backend="asyncio")


def test_a_server_without_jetstream_is_an_empty_fleet_not_an_error(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", jetstream=False)
    server.start()
    try:

        async def scenario() -> None:
            nc = await nats.connect(server.url)
            view = FleetView(nc, fill_timeout=2)
            try:
                started = time.monotonic()
                await view.start()
                assert time.monotonic() - started < 2
                assert view.snapshot().nodes == [] and view.firing() == []
            finally:
                await view.stop()
                await nc.close()

        anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()


async def ticked(nc: Client) -> None:
    """Once the node's worker has ticked: its service answers with telemetry."""
    with anyio.fail_after(15):
        while True:
            try:
                reply = await nc.request(endpoint(NODE, "telemetry"), b"", timeout=1)
            except nats.errors.Error:
                reply = None
            if reply is not None and not (reply.headers or {}).get("Nats-Service-Error-Code"):
                return
            await anyio.sleep(0.1)


def test_a_view_that_missed_a_node_s_inventory_asks_the_node_for_it(
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    # No JetStream: the inventory the worker published at its start is kept nowhere.
    server = NatsServer(tmp_path / "js", jetstream=False)
    server.start()
    node = ShardNode(server.url, fake_gpu, shard_procs, workers, tmp_path)
    try:
        node.start()

        async def scenario() -> None:
            nc = await nats.connect(server.url)
            view = FleetView(nc, fill_timeout=1)
            try:
                await ticked(nc)  # the worker's inventory went out before the view started
                await view.start()
                await eventually_async(lambda: view.telemetry(NODE) is not None)
                await eventually_async(lambda: view.sample(NODE) is not None)
                joined = view.sample(NODE)
                assert joined is not None
                assert [g.name for g in joined.gpus] == ["NVIDIA A100-SXM4-80GB"] * 2
                assert [(p.pid, p.shard) for p in joined.gpus[0].processes] == [
                    (node.holding, "holding")
                ]
                assert view.undecodable == 0
            finally:
                await view.stop()
                await nc.close()

        anyio.run(scenario, backend="asyncio")
        node.stop()
    finally:
        server.stop()


def test_gateway_example_prints_free_memory_and_verdicts(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "gateway.py"), node.url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"{NODE} GPU 0 NVIDIA A100-SXM4-80GB: 39.5 GiB free" in lines
    assert f"{NODE} GPU 1 NVIDIA A100-SXM4-80GB: 79.5 GiB free" in lines
    assert f"{NODE} shard holding: gpu" in lines
    assert any(line.startswith(f"{NODE} shard idle: cpu_fallback (") for line in lines)
    node.stop()


def test_msgpack_bucket_values_are_read_and_deleted_keys_skipped(nats_server: NatsServer) -> None:
    # A worker run with --encoding msgpack puts msgpack values, without headers, in the bucket.
    when = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    kept = ComputeStatus(node="n9", shard="a", session="s", time=when, verdict="misplaced")
    removed = ComputeStatus(node="n9", shard="b", session="s", time=when, verdict="gpu")

    async def scenario() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            kv = await nc.jetstream().create_key_value(bucket=COMPUTE.name)
            await kv.put(subjects.shard_key("n9", "a"), encode(kept, "msgpack")[0])
            await kv.put(subjects.shard_key("n9", "b"), encode(removed, "msgpack")[0])
            await kv.delete(subjects.shard_key("n9", "b"))
            view = FleetView(nc)
            await view.start()
            await view.stop()
            assert view.shards == {("n9", "a"): kept}
            assert [f.verdict for f in view.firing()] == ["misplaced"]
            assert view.undecodable == 0
        finally:
            await nc.close()

    anyio.run(scenario, backend="asyncio")


def test_a_node_whose_clock_is_off_or_steps_back_is_followed_by_arrival(
    nats_server: NatsServer,
) -> None:
    # A node an hour ahead publishes into the streams before the view starts; NTP then steps
    # its clock back (same session), and later it restarts a minute behind. Each message is
    # taken, and its age is counted from its arrival (or storing), not from its `time`.
    now = datetime.now(UTC)
    inventory, ahead = lean.split(node_sample("gpu-31", now + timedelta(hours=1)))
    status = ComputeStatus(
        node="gpu-31", shard="llama", session="s1", time=ahead.time, placed_gpus=[0], verdict="gpu"
    )
    settings = StreamSettings()

    async def published(nc: Client, subject: str, message: msgspec.Struct) -> None:
        data, headers = encode(message)
        await nc.publish(subject, data, headers=headers)
        await nc.flush()

    async def scenario() -> None:
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        for stream in (TELEMETRY, INVENTORY, EVENTS):
            await ensure_stream(js, stream, settings)
        kv = await ensure_bucket(js, COMPUTE, settings)
        await published(nc, subjects.inventory("gpu-31"), inventory)
        await published(nc, subjects.telemetry("gpu-31"), ahead)
        await kv.put(subjects.shard_key("gpu-31", "llama"), encode(status)[0])
        view = FleetView(nc)
        try:
            await view.start()
            assert view.sample("gpu-31") is not None
            assert view.stale() == []
            (gpu, _) = view.gpus_for(0)
            assert gpu.node == "gpu-31" and gpu.age_s < 5
            assert 3590 < view.nodes["gpu-31"].clock_offset_s < 3610
            # Six seconds on with nothing new, it is stale: its clock ahead does not keep it.
            later = datetime.now(UTC) + timedelta(seconds=6.5)
            assert [s.node for s in view.stale(now=later)] == ["gpu-31"]

            # NTP steps the clock back an hour: the next sample and status are earlier.
            stepped = msgspec.structs.replace(ahead, seq=8, time=now)
            fallen = msgspec.structs.replace(status, time=now, verdict="cpu_fallback")
            await published(nc, subjects.telemetry("gpu-31"), stepped)
            await published(nc, subjects.compute("gpu-31", "llama"), fallen)
            await eventually_async(lambda: getattr(view.telemetry("gpu-31"), "seq", None) == 8)
            await eventually_async(lambda: [f.shard for f in view.firing()] == ["llama"])
            # Copies read again from the stream and the bucket change nothing: the stream's is
            # seq 8 again, and the bucket's `gpu` was stored before `cpu_fallback` arrived.
            copies = await last_per_subject(nc, TELEMETRY.name, "placewatch.telemetry.>", 2)
            copies += await last_per_subject(
                nc, COMPUTE.stream, subjects.kv_subject(COMPUTE.name), 2
            )
            assert len(copies) == 2
            telemetry_copy, status_copy = copies
            view._hold(
                telemetry_copy.data,
                telemetry_copy.headers,
                NodeTelemetry,
                telemetry_copy.subject,
                stored_at(telemetry_copy),
            )
            headers = kv_headers(status_copy.data, status_copy.headers or {})
            view._hold(
                status_copy.data,
                headers,
                ComputeStatus,
                status_copy.subject,
                stored_at(status_copy),
            )
            assert getattr(view.telemetry("gpu-31"), "seq", None) == 8
            assert getattr(view.status("gpu-31", "llama"), "verdict", None) == "cpu_fallback"

            # It restarts a minute behind: a new session, seq 0, an earlier time still.
            behind = msgspec.structs.replace(
                ahead, session="s2", seq=0, time=now - timedelta(seconds=60)
            )
            await published(nc, subjects.telemetry("gpu-31"), behind)
            await eventually_async(
                lambda: getattr(view.telemetry("gpu-31"), "session", None) == "s2"
            )
            assert view.stale() == [] and len(view.gpus_for(0)) == 2
            assert -70 < view.nodes["gpu-31"].clock_offset_s < -55
            assert view.snapshot().seen["gpu-31"] == view.nodes["gpu-31"].seen
        finally:
            await view.stop()
            await nc.close()

    anyio.run(scenario, backend="asyncio")
