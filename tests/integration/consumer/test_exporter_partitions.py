"""A fleet divided among exporters: by the servers' partition mapping (every node in exactly
one partition, for N = 1 to 5, with node names as clouds and clusters give them) or by a glob
of node names; each exporter says what it serves. A real nats-server, real exporters."""

from __future__ import annotations

import gzip
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import anyio
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from placewatch.consumer.fleet import FleetView
from placewatch.schemas import NodeSample, encode, lean, partitions, subjects

from tests.conftest import NatsServer
from tests.support.eventually import eventually, eventually_async
from tests.support.exporter import Exporter, publish_nodes

NAMES = [
    *(f"ip-10-0-{i}-{40 + 3 * i}.ec2.internal" for i in range(6)),  # EC2's private DNS names
    *(f"gke-prod-gpu-pool-7f3a2c1e-{s}" for s in ("x9z8", "k2m4", "q7r1", "b5t6")),  # GKE
    *(f"aks-gpunp-31415926-vmss00000{i}" for i in range(4)),  # AKS scale-set nodes
    *(f"dgx-h100-{i:03d}" for i in (1, 2, 17, 64)),  # on-premises, by rack position
    *(f"rack{r}-gpu-{i:02d}" for r in (1, 2) for i in (3, 7, 11)),
    "node07.cluster.local",
    "GPU_NODE_12",
]
"""Dots, underscores and capitals included: the servers hash a name's subject token, which
escapes a dot (placewatch.schemas.subjects.token)."""


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_every_node_is_in_exactly_one_partition_of_the_servers_mapping(
    tmp_path: Path, n: int
) -> None:
    """N views, one a partition, on servers mapping N partitions: each node held by exactly
    one, the one partition_of names, and no view finds the mapping wrong."""
    server = NatsServer(tmp_path / "js", config=partitions.server_config("placewatch", n))
    server.start()

    async def divided() -> list[set[str]]:
        nc = await nats.connect(server.url)
        views = [FleetView(nc, partition=p, partitions=n) for p in range(n)]
        try:
            for view in views:
                await view.start()  # subscribed: what this connection publishes next, each takes
            await publish_nodes(nc, NAMES)
            await eventually_async(
                lambda: sum(len(v.nodes) for v in views) >= len(NAMES), 30, what="every node held"
            )
            assert [v.problems() for v in views] == [[] for _ in views]
            return [set(v.nodes) for v in views]
        finally:
            for view in views:
                await view.stop()
            await nc.close()

    try:
        held = anyio.run(divided)
    finally:
        server.stop()
    assert set().union(*held) == set(NAMES)
    assert sum(map(len, held)) == len(NAMES)  # no node in two
    for p, nodes in enumerate(held):
        assert nodes == {x for x in NAMES if partitions.partition_of(x, n) == p}
    if n > 1:
        assert all(held)  # these names reach every partition


def series(text: str, name: str) -> list[dict[str, str]]:
    return [
        s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    ]


def scrape_gzip(exporter: Exporter) -> str:
    """/metrics as Prometheus asks for it: gzip, streamed without a length."""
    request = urllib.request.Request(
        f"{exporter.base}/metrics", headers={"Accept-Encoding": "gzip"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Encoding"] == "gzip"
        assert "Content-Length" not in answer.headers
        return gzip.decompress(answer.read()).decode()


def test_exporters_of_three_partitions_and_one_glob_serve_theirs_and_say_which(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "js", config=partitions.server_config("placewatch", 3))
    server.start()
    started: list[Exporter] = []
    try:
        started += [Exporter(server.url, "--partition", f"{p}/3") for p in range(3)]
        started.append(Exporter(server.url, "--nodes", "rack1-*"))
        wanted = [{x for x in NAMES if partitions.partition_of(x, 3) == p} for p in range(3)]
        wanted.append({x for x in NAMES if x.startswith("rack1-")})

        def up(exporter: Exporter) -> set[str]:
            return {s["node"] for s in series(scrape_gzip(exporter), "placewatch_node_up")}

        async def send() -> None:
            nc = await nats.connect(server.url)
            try:
                await publish_nodes(nc, NAMES)
            finally:
                await nc.close()

        def served() -> bool:
            anyio.run(send)  # until every view started and took them live
            return [up(e) for e in started] == wanted

        eventually(served, 30, every=0.3, what="each exporter serving its nodes")
        says = [series(e.metrics(), "placewatch_exporter_serves") for e in started]
        assert says == [
            [{"partition": "0/3", "nodes": "*"}],
            [{"partition": "1/3", "nodes": "*"}],
            [{"partition": "2/3", "nodes": "*"}],
            [{"partition": "", "nodes": "rack1-*"}],
        ]
        for exporter in started:
            code, err = exporter.stop()
            assert code == 0, err
            assert "Traceback" not in err
    finally:
        for exporter in started:
            if exporter.proc.poll() is None:
                exporter.proc.kill()
                exporter.proc.communicate()
        server.stop()


def test_a_view_of_some_nodes_lets_the_others_go_by_their_subject_undecoded(
    nats_server: NatsServer,
) -> None:
    """Bytes that are no message, on another node's subject, are not even read (not counted
    unreadable); on one of its nodes' subjects, they are read and counted malformed."""
    rack1 = {x for x in NAMES if x.startswith("rack1-")}

    async def follow() -> tuple[set[str], dict[str, int]]:
        nc = await nats.connect(nats_server.url)
        view = FleetView(nc, only=lambda node: node.startswith("rack1-"))
        try:
            await view.start()
            await nc.publish(subjects.telemetry("rack2-gpu-03"), b"no message")
            await nc.publish(subjects.telemetry("rack1-gpu-03"), b"no message")
            await publish_nodes(nc, NAMES)
            await eventually_async(lambda: set(view.nodes) == rack1, 20, what="rack1's nodes")
            return set(view.nodes) | set(view.inventories), dict(view.unreadable.counts)
        finally:
            await view.stop()
            await nc.close()

    held, unread = anyio.run(follow)
    assert held == rack1
    assert unread == {"schema": 0, "malformed": 1, "impostor": 0, "partition": 0}


def test_a_view_of_one_node_follows_that_node_s_subjects_alone(nats_server: NatsServer) -> None:
    """Every node publishes, published as is and as the mapping would map it: the view of one
    node is delivered that node's messages alone, in both forms."""
    node = "node07.cluster.local"
    mapped = partitions.mapped("telemetry", node, 3)

    async def follow() -> tuple[set[str], int]:
        nc = await nats.connect(nats_server.url)
        view = FleetView(nc, node=node)
        try:
            await view.start()
            await publish_nodes(nc, NAMES)
            payload, headers = encode(
                lean.split(
                    NodeSample(node=node, session="s", seq=1, time=datetime.now(UTC), interval_s=1)
                )[1]
            )
            await nc.publish(mapped, payload, headers=headers)
            await nc.flush()
            await eventually_async(
                lambda: view.nodes.get(node) is not None and view.nodes[node].seq == 1,
                20,
                what="both forms",
            )
            return set(view.nodes) | set(view.inventories), sum(s.delivered for s in view._subs)
        finally:
            await view.stop()
            await nc.close()

    held, delivered = anyio.run(follow)
    assert held == {node}
    assert delivered == 3  # its inventory and telemetry, and its telemetry as mapped
