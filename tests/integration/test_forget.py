"""`placewatch forget NODE` on a real nats-server: what a dead node left on the bus (its
shards' statuses, a fallback left firing, its telemetry and inventory in both subject
forms, its lease) as a worker's outbox stores it; the command run as a user runs it."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import msgspec
import nats
import nats.js.errors
import pytest

from placewatch.consumer import FleetView, Message
from placewatch.consumer.fleet import GONE_FROM_STREAMS
from placewatch.retained import BATCH
from placewatch.schemas import (
    ComputeStatus,
    FallbackEvent,
    NodeForgotten,
    NodeInventory,
    NodeTelemetry,
    decode_any,
    encode,
    partitions,
    subjects,
)
from placewatch.schemas.streams import COMPUTE, PLACEMENTS, Bucket, for_prefix
from placewatch.worker.bus.events import EventTracker
from placewatch.worker.bus.lease import LeaseKeeper, node_lease
from placewatch.worker.bus.outbox import EventOutbox
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream
from placewatch.worker.forget import newest_stored

from tests.conftest import ROOT, NatsServer, clean_env, free_port, run_placewatch
from tests.integration.test_permissions import two_nodes
from tests.integration.test_security import create_streams_as_admin
from tests.support.eventually import eventually_async
from tests.support.kv import kv_keys
from tests.support.relay import Relay

NODE, OTHER = "gpu-07", "gpu-08"
SILENT_S = 4
"""How long `--silent-for` waits in its tests: well past the start of a command on a busy
machine."""


def status(node: str, shard: str, verdict: str) -> ComputeStatus:
    return ComputeStatus(
        node=node,
        shard=shard,
        session="a1b2c3d4e5f6",
        time=datetime.now(UTC),
        placed_gpus=[1],
        verdict=verdict,  # type: ignore[arg-type]
        reason=f"{shard} said {verdict}",
    )


async def left_by_a_dead_node(url: str, prefix: str = subjects.DEFAULT_PREFIX) -> None:
    """What NODE's worker stored before it died, and what OTHER's (alive) did: statuses as a
    worker's outbox stores them, telemetry and inventory as published and as partitioned."""
    async with await nats.connect(url) as nc:
        outbox = EventOutbox(nc, prefix)
        await outbox.setup()
        for node in (NODE, OTHER):
            tracker = EventTracker(node, "a1b2c3d4e5f6", prefix)
            outbox.add(
                tracker.changes(
                    [
                        status(node, "llama-8b.a", "cpu_fallback"),
                        status(node, "embed", "gpu"),
                        status(node, "old", "gone"),
                    ]
                )
            )
            for kind in partitions.PARTITIONED:
                for subject in partitions.node_subjects(kind, node, prefix):
                    await nc.jetstream().publish(subject.replace("*", "3"), b"{}")
        assert await outbox.flush() == 8


async def kept(url: str, prefix: str = subjects.DEFAULT_PREFIX) -> dict[str, object]:
    """What the bus keeps: the compute bucket's keys, each node's last telemetry and
    inventory subjects, and the events stream's messages after the 8 set up (decoded)."""
    stores = for_prefix(prefix)
    async with await nats.connect(url) as nc:
        js = nc.jetstream()
        keys = await kv_keys(js, stores.compute.name)
        per_node = {}
        for kind in partitions.PARTITIONED:
            info = await js.stream_info(stores.streams_by_kind[kind].name, subjects_filter=">")
            per_node[kind] = sorted(info.state.subjects or {})
        events = await js.stream_info(stores.events.name)
        said = []
        for seq in range(9, events.state.last_seq + 1):
            msg = await js.get_msg(stores.events.name, seq)
            said.append(decode_any(msg.data or b"", msg.headers or {}))
        return {"keys": keys, **per_node, "said": said}


async def put(url: str, bucket: Bucket, values: dict[str, bytes]) -> None:
    """Each value under its key in `bucket`, made where missing, as a writer other than the
    worker puts it (a control plane's placements, a value of another version)."""
    async with await nats.connect(url) as nc:
        kv = await ensure_bucket(nc.jetstream(), bucket, StreamSettings())
        for key, value in values.items():
            await kv.put(key, value)


def told(will: str) -> list[str]:
    """What forget says of NODE's three shards: `will` say, or `would say`."""
    return [
        f"  {NODE} embed: gpu: {will} gone",
        f"  {NODE} llama-8b.a: cpu_fallback: {will} gone, and its fallback resolved",
        f"  {NODE} old: already gone",
    ]


def forgot(messages: int) -> str:
    """forget's last line, once it removed NODE's three keys, telemetry and inventory."""
    return (
        f"forgot node {NODE}: {messages} messages stored in stream PLACEWATCH_EVENTS; 3 keys "
        "removed from KV placewatch_compute; its telemetry removed from stream "
        "PLACEWATCH_TELEMETRY and its inventory removed from stream PLACEWATCH_INVENTORY; the "
        f"views told on placewatch.forgotten.{NODE}; its lease given back"
    )


def test_forget_resolves_what_the_node_left_firing_and_removes_what_the_bus_kept_of_it(
    nats_server: NatsServer,
) -> None:
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")

    done = run_placewatch("forget", NODE, "--nats", nats_server.url)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [*told("says"), forgot(3)]
    assert done.stderr == ""
    now = anyio.run(kept, nats_server.url, backend="asyncio")
    other = subjects.token(OTHER)
    assert now["keys"] == sorted(
        subjects.shard_key(OTHER, shard) for shard in ("embed", "llama-8b.a", "old")
    )
    assert now["telemetry"] == [f"placewatch.telemetry.3.{other}", f"placewatch.telemetry.{other}"]
    assert now["inventory"] == [f"placewatch.inventory.3.{other}", f"placewatch.inventory.{other}"]
    said = now["said"]
    assert isinstance(said, list)
    assert [
        (type(m).__name__, getattr(m, "state", None), s.node, s.shard, s.verdict)
        for m in said
        for s in [m.status if isinstance(m, FallbackEvent) else m]
    ] == [
        ("ComputeStatus", None, NODE, "embed", "gone"),
        ("FallbackEvent", "resolved", NODE, "llama-8b.a", "gone"),  # before its status
        ("ComputeStatus", None, NODE, "llama-8b.a", "gone"),
    ]
    sessions = {m.status.session if isinstance(m, FallbackEvent) else m.session for m in said}
    assert len(sessions) == 1
    assert sessions != {"a1b2c3d4e5f6"}  # forget's own, so its message ids are new
    assert all("`placewatch forget` on " in m.reason for m in said if isinstance(m, ComputeStatus))

    again = run_placewatch(
        "forget", NODE, "--nats", nats_server.url
    )  # nothing is left: nothing is said twice
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"forgot node {NODE}: 0 messages stored")
    assert anyio.run(kept, nats_server.url, backend="asyncio")["said"] == said


def test_a_dry_run_says_what_forget_would_do_and_changes_nothing(
    nats_server: NatsServer,
) -> None:
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")
    before = anyio.run(kept, nats_server.url, backend="asyncio")

    done = run_placewatch("forget", NODE, "--nats", nats_server.url, "--dry-run")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        *told("would say"),
        f"node {NODE}: 3 shard statuses, and its telemetry and inventory, would be removed "
        "from the bus (--dry-run: nothing changed)",
    ]
    assert anyio.run(kept, nats_server.url, backend="asyncio") == before


async def take_lease(url: str, node: str, interval_s: float) -> None:
    """A lease for `node` as a worker takes it, left behind as a killed worker leaves it."""
    async with await nats.connect(url) as nc:
        keeper = LeaseKeeper(node_lease(node, "f00dfeedbeef", interval_s), StreamSettings())
        await keeper.take_once(nc, nc.jetstream())


def test_forget_refuses_a_node_whose_lease_is_live_and_takes_it_once_it_expired(
    nats_server: NatsServer,
) -> None:
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")
    anyio.run(take_lease, nats_server.url, NODE, 1.0, backend="asyncio")
    before = anyio.run(kept, nats_server.url, backend="asyncio")

    refused = run_placewatch("forget", NODE, "--nats", nats_server.url)

    assert refused.returncode == 2
    assert refused.stdout == ""
    assert f"node {NODE} has a live worker (host " in refused.stderr
    assert "session f00dfeedbeef" in refused.stderr
    assert "Stop that worker" in refused.stderr
    assert refused.stderr.rstrip().endswith("nothing was changed")
    assert anyio.run(kept, nats_server.url, backend="asyncio") == before

    time.sleep(3.2)  # three of its 1 s intervals unrefreshed: expired
    done = run_placewatch("forget", NODE, "--nats", nats_server.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == forgot(3)


def test_a_key_forget_cannot_read_is_named_and_left_and_the_rest_forgotten(
    nats_server: NatsServer,
) -> None:
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")

    anyio.run(put, nats_server.url, COMPUTE, {f"{NODE}.weird": b"\x00not a status"})

    done = run_placewatch("forget", NODE, "--nats", nats_server.url)

    assert done.returncode == 1
    assert (
        f"  {NODE}: key '{NODE}.weird' in KV placewatch_compute holds no ComputeStatus this "
        "version can read: left as it is" in done.stdout
    )
    assert f"forgot node {NODE}: 3 messages stored" in done.stdout
    keys = anyio.run(kept, nats_server.url, backend="asyncio")["keys"]
    assert isinstance(keys, list)
    assert [k for k in keys if k.startswith(NODE)] == [f"{NODE}.weird"]


def test_forget_under_a_prefix_touches_that_prefix_alone(nats_server: NatsServer) -> None:
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")
    anyio.run(left_by_a_dead_node, nats_server.url, "staging", backend="asyncio")
    before = anyio.run(kept, nats_server.url, backend="asyncio")

    done = run_placewatch("forget", NODE, "--nats", nats_server.url, "--prefix", "staging")

    assert done.returncode == 0, done.stderr
    assert "KV staging_compute" in done.stdout
    staging = anyio.run(kept, nats_server.url, "staging", backend="asyncio")
    assert not [k for k in staging["keys"] if k.startswith(NODE)]  # type: ignore[attr-defined]
    assert anyio.run(kept, nats_server.url, backend="asyncio") == before


def test_forget_on_a_bus_that_never_held_the_prefix_says_so_and_exits_1(
    nats_server: NatsServer,
) -> None:
    done = run_placewatch("forget", NODE, "--nats", nats_server.url)

    assert done.returncode == 1
    assert done.stdout == ""
    assert f"placewatch: forget {NODE}: " in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"placewatch: forget {NODE}: this server keeps nothing under prefix placewatch (stream "
        "not found): check --prefix (PLACEWATCH_PREFIX); nothing was changed"
    )
    assert "Traceback" not in done.stderr


def test_forget_with_no_server_says_where_it_looked_and_changes_nothing() -> None:
    done = run_placewatch(
        "forget", NODE, "--nats", f"nats://127.0.0.1:{free_port()}", "--timeout", "1"
    )

    assert done.returncode == 1
    assert "cannot reach NATS at nats://127.0.0.1:" in done.stderr
    assert done.stderr.rstrip().endswith("nothing changed")


@pytest.mark.parametrize("node", ["", "n" * 300])
def test_a_node_name_no_worker_could_have_is_refused_before_connecting(node: str) -> None:
    done = run_placewatch("forget", node, "--nats", "nats://127.0.0.1:1")

    assert done.returncode == 2
    assert "give this node a name of 1 to 128 bytes" in done.stderr
    assert "Traceback" not in done.stderr


def test_with_a_nodes_own_credentials_forget_says_it_gone_and_what_it_could_not_remove(
    tmp_path: Path,
) -> None:
    """The node permissions of docs/operations.md allow the node's own subjects and keys but
    no purge: the shards are said gone (so every alert ends), and the removal is refused with
    what to do; the operator's credentials then remove the rest."""
    server = NatsServer(tmp_path / "js", config=two_nodes())
    server.start()
    try:
        admin = server.url.replace("nats://", "nats://admin:adminpw@")
        anyio.run(create_streams_as_admin, server.url, backend="asyncio")
        anyio.run(left_by_a_dead_node, admin, backend="asyncio")
        as_node = clean_env() | {"PLACEWATCH_USER": NODE, "PLACEWATCH_PASSWORD": f"{NODE}pw"}

        done = run_placewatch("forget", NODE, "--nats", server.url, "--timeout", "1", env=as_node)
        print(done.stderr)

        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == (
            f"placewatch: forget {NODE}: 3 messages stored in stream PLACEWATCH_EVENTS, so every "
            "consumer hears its shards gone; but what the bus keeps of the node was not removed "
            "(no answer): forget's credentials must be allowed to purge the streams "
            "(docs/operations.md, A node gone for good); run it again with such credentials"
        )
        kept_now = anyio.run(kept, admin, backend="asyncio")
        assert len(kept_now["said"]) == 3  # type: ignore[arg-type]
        assert f"placewatch.telemetry.{NODE}" in kept_now["telemetry"]  # type: ignore[operator]

        again = run_placewatch("forget", NODE, "--nats", admin)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines() == [
            f"  {NODE} embed: already gone",
            f"  {NODE} llama-8b.a: already gone",
            f"  {NODE} old: already gone",
            forgot(0),
        ]
        assert not [k for k in anyio.run(kept, admin, backend="asyncio")["keys"] if NODE in k]  # type: ignore[attr-defined]
    finally:
        server.stop()


def forget_user() -> str:
    """The operator's forget credentials docs/operations.md gives, as a user block."""
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"<!-- forget-permissions -->\s*```\n(.*?)```", doc, re.S)
    assert block, "docs/operations.md lost its forget-permissions block"
    return block.group(1).replace("$FORGET_PASSWORD", "forgetpw")


@pytest.mark.parametrize("silent", [False, True], ids=["NODE", "--silent-for"])
def test_the_documented_forget_credentials_forget_a_node_with_no_refusal(
    tmp_path: Path, silent: bool
) -> None:
    config = two_nodes().replace("  ]\n}\n", forget_user() + "  ]\n}\n")
    server = NatsServer(tmp_path / "js", config=config)
    server.start()
    try:
        admin = server.url.replace("nats://", "nats://admin:adminpw@")
        anyio.run(create_streams_as_admin, server.url, backend="asyncio")
        anyio.run(left_by_a_dead_node, admin, backend="asyncio")
        anyio.run(take_lease, admin, NODE, 0.2, backend="asyncio")
        # Its lease expired (three of its 0.2 s intervals), and it is silent past SILENT_S.
        time.sleep(SILENT_S + 0.5 if silent else 1.2)
        anyio.run(publish_telemetry, admin, OTHER, backend="asyncio")  # OTHER is heard from
        as_forget = clean_env() | {"PLACEWATCH_USER": "forget", "PLACEWATCH_PASSWORD": "forgetpw"}
        which = ["--silent-for", f"{SILENT_S}s"] if silent else [NODE]

        done = run_placewatch(
            "forget", *which, "--nats", server.url, "--timeout", "2", env=as_forget
        )

        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        said = [f"1 of 2 nodes silent for more than {SILENT_S} s: {NODE}"] if silent else []
        assert done.stdout.splitlines() == [*said, *told("says"), forgot(3)]
        now = anyio.run(kept, admin, backend="asyncio")
        assert not [k for k in now["keys"] if k.startswith(NODE)]  # type: ignore[attr-defined]
        assert now["telemetry"] == [
            f"placewatch.telemetry.3.{OTHER}",
            f"placewatch.telemetry.{OTHER}",
        ]
    finally:
        server.stop()


async def publish_telemetry(url: str, node: str, *, inventory: bool = False) -> None:
    """A NodeTelemetry of `node` into the telemetry stream now (and, `inventory`, the
    NodeInventory it names): the node is heard from."""
    now = datetime.now(UTC)
    telemetry = NodeTelemetry(
        node=node, session="a1b2c3d4e5f6", time=now, seq=2, interval_s=2.0, inventory="i1"
    )
    said: list[tuple[str, msgspec.Struct]] = [(subjects.telemetry(node), telemetry)]
    if inventory:
        kept = NodeInventory(node=node, session="a1b2c3d4e5f6", time=now, id="i1")
        said.insert(0, (subjects.inventory(node), kept))
    async with await nats.connect(url) as nc:
        for subject, message in said:
            payload, headers = encode(message)
            await nc.jetstream().publish(subject, payload, headers=headers)


def test_silent_for_forgets_every_node_the_bus_heard_nothing_of_for_that_long(
    nats_server: NatsServer,
) -> None:
    # The other node is heard from just before each run; the dead one was heard from
    # SILENT_S and more before: a second or two of a busy machine's start of the command
    # leaves both on their sides of the line.
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")
    time.sleep(SILENT_S + 0.5)
    anyio.run(publish_telemetry, nats_server.url, OTHER, backend="asyncio")
    before = anyio.run(kept, nats_server.url, backend="asyncio")
    silent = ("forget", "--silent-for", f"{SILENT_S}s", "--nats", nats_server.url)

    dry = run_placewatch(*silent, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == f"1 of 2 nodes silent for more than {SILENT_S} s: {NODE}"
    assert anyio.run(kept, nats_server.url, backend="asyncio") == before

    anyio.run(publish_telemetry, nats_server.url, OTHER, backend="asyncio")
    done = run_placewatch(*silent)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"1 of 2 nodes silent for more than {SILENT_S} s: {NODE}",
        *told("says"),
        forgot(3),
    ]
    now = anyio.run(kept, nats_server.url, backend="asyncio")
    assert not [k for k in now["keys"] if k.startswith(NODE)]  # type: ignore[attr-defined]
    assert len(now["keys"]) == 3  # type: ignore[arg-type]
    assert f"placewatch.telemetry.{OTHER}" in now["telemetry"]  # type: ignore[operator]

    nobody = run_placewatch("forget", "--silent-for", "1h", "--nats", nats_server.url)
    assert nobody.returncode == 0, nobody.stderr
    assert nobody.stdout == "0 of 1 nodes silent for more than 3600 s: none\n"


@pytest.mark.parametrize(
    ("shards", "said", "them"),
    [(("embed", "llama-8b.a"), "2 placements", "them"), (("embed",), "1 placement", "it")],
)
def test_the_nodes_placements_are_counted_and_left_to_its_control_plane(
    nats_server: NatsServer, shards: tuple[str, ...], said: str, them: str
) -> None:
    anyio.run(left_by_a_dead_node, nats_server.url, backend="asyncio")

    placement = b'{"id": "x", "gpus": [0]}'
    placed = {subjects.shard_key(NODE, shard): placement for shard in shards}
    anyio.run(put, nats_server.url, PLACEMENTS, placed)

    done = run_placewatch("forget", NODE, "--nats", nats_server.url)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        *told("says"),
        f"  {NODE}: {said} in KV placewatch_placements, left to the control plane that wrote "
        f"{them}; a worker started under this name acts on {them}",
        forgot(3),
    ]


async def both_heard_from(url: str) -> None:
    """What NODE left when it died and OTHER keeps up, and each node's telemetry and
    inventory in the streams: a view that starts holds both."""
    await left_by_a_dead_node(url)
    for node in (NODE, OTHER):
        await publish_telemetry(url, node, inventory=True)


def test_a_view_that_runs_lets_the_node_go_and_one_started_later_never_holds_it(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    anyio.run(both_heard_from, url, backend="asyncio")

    async def scenario() -> None:
        async with await nats.connect(url) as nc:
            heard: list[Message] = []
            view = FleetView(nc, on_change=heard.append)
            await view.start()
            assert [n for n in (NODE, OTHER) if view.sample(n) is not None] == [NODE, OTHER]
            assert [f.node for f in view.firing()] == [NODE, OTHER]
            heard.clear()

            done = await anyio.to_thread.run_sync(
                lambda: run_placewatch("forget", NODE, "--nats", url)
            )

            assert done.returncode == 0, done.stderr
            with anyio.fail_after(5):
                while NODE in view.inventories:
                    await anyio.sleep(0.02)
            assert (sorted(view.nodes), sorted(view.inventories)) == ([OTHER], [OTHER])
            assert {node for node, _ in view.shards} == {OTHER}
            assert [f.node for f in view.firing()] == [OTHER]
            # The shards said gone first, then the node forgotten: a view hears them in order.
            assert [type(m).__name__ for m in heard][-1] == "NodeForgotten"
            assert {m.node for m in heard if isinstance(m, ComputeStatus)} == {NODE}
            said = heard[-1]
            assert isinstance(said, NodeForgotten)
            assert said.node == NODE and "`placewatch forget` on " in said.reason
            await view.stop()

            later = FleetView(nc)
            await later.start()
            assert (sorted(later.nodes), sorted(later.inventories)) == ([OTHER], [OTHER])
            assert {node for node, _ in later.shards} == {OTHER}
            await later.stop()

    anyio.run(scenario, backend="asyncio")


def test_a_view_cut_off_while_the_node_is_forgotten_lets_it_go_once_it_is_back(
    nats_server: NatsServer,
) -> None:
    # The view's connection runs through a relay that is cut while NODE is forgotten and
    # OTHER's embed falls back: it hears neither, then catches up from the bus once back,
    # though no node publishes again.
    url = nats_server.url
    anyio.run(both_heard_from, url, backend="asyncio")

    async def scenario() -> None:
        with Relay(nats_server.port) as relay:
            nc = await nats.connect(relay.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
            heard: list[Message] = []
            view = FleetView(nc, on_change=heard.append)
            await view.start()
            assert (sorted(view.nodes), sorted(view.inventories)) == ([NODE, OTHER], [NODE, OTHER])
            assert view.status(OTHER, "embed").verdict == "gpu"  # type: ignore[union-attr]

            relay.cut()
            await eventually_async(lambda: not nc.is_connected)
            done = await anyio.to_thread.run_sync(
                lambda: run_placewatch("forget", NODE, "--nats", url)
            )
            assert done.returncode == 0, done.stderr
            async with await nats.connect(url) as writer:
                outbox = EventOutbox(writer)
                outbox.add(EventTracker(OTHER, "b2c3d4e5f6a1").changes([fell_back]))
                assert await outbox.flush() == 2  # its status and the fallback it fires
            assert NODE in view.nodes and view.status(OTHER, "embed").verdict == "gpu"  # type: ignore[union-attr]
            heard.clear()

            relay.mend()
            await eventually_async(lambda: nc.is_connected)
            await eventually_async(lambda: NODE not in view.nodes and NODE not in view.inventories)

            assert (sorted(view.nodes), sorted(view.inventories)) == ([OTHER], [OTHER])
            assert {node for node, _ in view.shards} == {OTHER}
            assert [(f.node, f.shard) for f in view.firing()] == [
                (OTHER, "embed"),
                (OTHER, "llama-8b.a"),
            ]
            said = [m for m in heard if isinstance(m, NodeForgotten)]
            assert [(m.node, m.reason) for m in said] == [(NODE, GONE_FROM_STREAMS)]
            assert relay.accepted == 2
            await view.stop()
            await nc.close()

    fell_back = status(OTHER, "embed", "cpu_fallback")
    anyio.run(scenario, backend="asyncio")


async def newest_of_a_fleet(url: str, nodes: list[str]) -> tuple[float, dict[str, float]]:
    """Each of `nodes` heard from (its telemetry; every other one's inventory too) and a
    message that is no node's in the telemetry stream; when that began, and what
    newest_stored then finds."""
    began = time.time()
    stores = for_prefix(subjects.DEFAULT_PREFIX)
    async with await nats.connect(url) as nc:
        js = nc.jetstream()
        for stream in (stores.telemetry, stores.inventory):
            await ensure_stream(js, stream, StreamSettings())
        for i, node in enumerate(nodes):
            telemetry = NodeTelemetry(
                node=node,
                session="s1",
                time=datetime.now(UTC),
                seq=1,
                interval_s=2.0,
                inventory="i",
            )
            payload, headers = encode(telemetry)
            await js.publish(subjects.telemetry(node), payload, headers=headers)
            if i % 2 == 0:
                inventory = NodeInventory(node=node, session="s1", time=datetime.now(UTC), id="i")
                payload, headers = encode(inventory)
                await js.publish(subjects.inventory(node), payload, headers=headers)
        await js.publish(subjects.telemetry("stray"), b"not a message")
        return began, await newest_stored(nc, subjects.DEFAULT_PREFIX, 10.0)


def test_silent_for_finds_every_node_of_a_fleet_larger_than_a_batch(
    nats_server: NatsServer,
) -> None:
    nodes = [f"gpu-{i:04d}" for i in range(3 * BATCH + 7)]

    began, newest = anyio.run(newest_of_a_fleet, nats_server.url, nodes, backend="asyncio")

    assert sorted(newest) == nodes  # the stray message is nobody's
    assert all(began - 1 <= stored <= time.time() + 1 for stored in newest.values())
