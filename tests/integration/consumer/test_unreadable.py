"""What a view cannot read is counted by why and said once a node: a worker of an older or
newer schema, a malformed message, a schema-1 worker's subject for a dotted name."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import anyio
import msgspec
import nats
import pytest

from placewatch.consumer import FleetView
from placewatch.schemas import ComputeStatus, FallbackEvent, encode, lean, subjects
from placewatch.schemas.codec import HEADER_SCHEMA

from tests.conftest import NatsServer
from tests.support.eventually import eventually_async
from tests.support.held import node_sample

NOW = datetime.now(UTC)


def test_a_view_counts_what_it_cannot_read_by_reason_and_names_each_node_once(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="placewatch.consumer")
    _, telemetry = lean.split(node_sample("gpu-old", NOW))
    old = msgspec.json.encode(msgspec.structs.replace(telemetry, schema=1))
    newer, headers = encode(msgspec.structs.replace(telemetry, node="gpu-new"))
    newer_headers = headers | {HEADER_SCHEMA: "3"}
    # A schema-1 worker wrote shard "a.b" as the token "a_b" (schema 2: "a=2Eb").
    status = ComputeStatus(
        schema=1, node="gpu-1", shard="a.b", session="s", time=NOW, verdict="cpu_fallback"
    )
    event = FallbackEvent(schema=1, state="firing", status=status)

    async def scenario() -> tuple[dict[str, int], list[str]]:
        nc = await nats.connect(nats_server.url)
        view = FleetView(nc)
        try:
            await view.start()
            for _ in range(2):
                await nc.publish(subjects.telemetry("gpu-old"), old, headers=headers)
                await nc.publish(subjects.telemetry("gpu-new"), newer, headers=newer_headers)
                await nc.publish(subjects.telemetry("gpu-bad"), b"{not json", headers=headers)
                data, event_headers = encode(event)
                await nc.publish("placewatch.fallback.gpu-1.a_b", data, headers=event_headers)
            await nc.flush()
            await eventually_async(lambda: view.unreadable.total == 8)
            return dict(view.unreadable.counts), view.problems()
        finally:
            await view.stop()
            await nc.close()

    counts, problems = anyio.run(scenario, backend="asyncio")
    assert counts == {"schema": 6, "malformed": 2, "impostor": 0, "partition": 0}
    assert problems == [
        "8 messages not read (schema 6, malformed 2): the log names the first of each node "
        "and what to do"
    ]
    logged = [r.getMessage() for r in caplog.records if r.name == "placewatch.consumer.unreadable"]
    assert len(logged) == 4  # the first of each node
    assert logged[0].startswith(
        "ignored a message of node 'gpu-old' on placewatch.telemetry.gpu-old (schema): a "
        "NodeTelemetry of schema 1, which this reader no longer reads"
    )
    assert "upgrade the placewatch that sent it" in logged[0]
    assert logged[1].startswith(
        "ignored a message of node 'gpu-new' on placewatch.telemetry.gpu-new (schema): a "
        "NodeTelemetry of schema 3, newer than this reader's 2: upgrade placewatch"
    )
    assert logged[2].startswith(
        "ignored a message of node 'gpu-bad' on placewatch.telemetry.gpu-bad (malformed): "
        "not a valid NodeTelemetry"
    )
    assert logged[3] == (
        "ignored a message of node 'gpu-1' on placewatch.fallback.gpu-1.a_b (schema): schema "
        "1: its worker writes names in subjects as schema 1 did, so its subject and its names "
        "disagree; upgrade the worker that sent it (docs/subjects.md, Changes)"
    )
    assert not [r for r in caplog.records if r.name == "placewatch.consumer.impostors"]
