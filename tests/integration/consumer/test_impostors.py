"""A message on one node's subject that names another node is refused by every reader: the
servers' permissions give a node its own subjects alone, so what comes there is its word
about itself, never about another node."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import anyio
import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from placewatch.consumer import FleetView
from placewatch.retained import compute_statuses
from placewatch.schemas import (
    ComputeStatus,
    FallbackEvent,
    NodeForgotten,
    encode,
    lean,
    subjects,
)
from placewatch.schemas.service import endpoint
from placewatch.schemas.streams import COMPUTE, EVENTS, INVENTORY, TELEMETRY
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream
from placewatch.worker.forget import newest_stored

from tests.conftest import NatsServer
from tests.support.eventually import eventually_async
from tests.support.held import node_sample

NOW = datetime.now(UTC)
INVENTORY_08, TELEMETRY_08 = lean.split(node_sample("gpu-08", NOW))
STATUS_08 = ComputeStatus(
    node="gpu-08", shard="llama", session="s1", time=NOW, verdict="cpu_fallback", reason="cpu"
)
SPOKEN_FOR_08 = [
    (subjects.inventory("gpu-07"), INVENTORY_08),
    (subjects.telemetry("gpu-07"), TELEMETRY_08),
    (subjects.compute("gpu-07", "llama"), STATUS_08),
    (subjects.fallback("gpu-07", "llama"), FallbackEvent(state="firing", status=STATUS_08)),
    (subjects.forgotten("gpu-07"), NodeForgotten(node="gpu-08", time=NOW, reason="gone")),
    (subjects.compute("gpu-08", "mistral"), STATUS_08),  # its own node, another shard's key
    # Tokens after gpu-07's own: the last ones are gpu-08's and its shard's.
    ("placewatch.fallback.gpu-07.gpu-08.llama", FallbackEvent(state="firing", status=STATUS_08)),
    ("placewatch.compute.gpu-07.gpu-08.llama", STATUS_08),
]
"""What gpu-07's subjects (and one of gpu-08's, of another shard) carry about gpu-08."""


async def published(nc: Client, subject: str, message: msgspec.Struct) -> None:
    data, headers = encode(message)
    await nc.publish(subject, data, headers=headers)
    await nc.flush()


def test_a_view_takes_no_node_s_word_about_another_live_from_the_stores_or_as_a_reply(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="placewatch.consumer")

    async def scenario() -> None:
        nc = await nats.connect(nats_server.url)

        async def answer_as_gpu_09(msg: Msg) -> None:  # on gpu-08's inventory endpoint
            await published(nc, msg.reply, msgspec.structs.replace(INVENTORY_08, node="gpu-09"))

        js = nc.jetstream()
        for stream in (TELEMETRY, INVENTORY, EVENTS):
            await ensure_stream(js, stream, StreamSettings())
        kv = await ensure_bucket(js, COMPUTE, StreamSettings())
        # Kept before any reader starts: gpu-07's inventory, telemetry and status key, each
        # naming gpu-08.
        for subject, message in SPOKEN_FOR_08[:2]:
            await published(nc, subject, message)
        await kv.put(subjects.shard_key("gpu-07", "llama"), encode(STATUS_08)[0])
        assert await newest_stored(nc, "placewatch", 5) == {}
        assert await compute_statuses(nc, "placewatch", 5) == []

        await nc.subscribe(endpoint("gpu-08", "inventory"), cb=answer_as_gpu_09)
        view = FleetView(nc)
        try:
            await view.start()
            assert (view.nodes, view.inventories, view.shards) == ({}, {}, {})
            assert view.undecodable == view.impostors.count == 3

            # gpu-08 speaks for itself: taken. Its telemetry names an inventory the view does
            # not hold, so the view asks gpu-08's endpoint, where the answer names gpu-09.
            await published(nc, subjects.telemetry("gpu-08"), TELEMETRY_08)
            await published(nc, subjects.compute("gpu-08", "llama"), STATUS_08)
            await eventually_async(lambda: view.status("gpu-08", "llama") is not None)
            await eventually_async(lambda: view.impostors.count == 4)
            # Then everything that speaks for it, live, twice over.
            for subject, message in SPOKEN_FOR_08 * 2:
                await published(nc, subject, message)
            await eventually_async(lambda: view.impostors.count == 4 + 2 * len(SPOKEN_FOR_08))

            assert set(view.nodes) == {"gpu-08"}  # not forgotten by gpu-07's NodeForgotten
            assert view.inventories == {}
            held = view.telemetry("gpu-08")
            assert held is not None and held.seq == TELEMETRY_08.seq
            assert view.shards == {("gpu-08", "llama"): STATUS_08}
            assert view.undecodable == view.impostors.count
            assert view.impostors.by_subject == {
                subjects.inventory("gpu-07"): 3,  # once kept, twice live
                subjects.telemetry("gpu-07"): 3,
                subjects.kv_subject(COMPUTE.name, subjects.shard_key("gpu-07", "llama")): 1,
                subjects.inventory("gpu-08"): 1,  # the reply, for what it stands for
                subjects.compute("gpu-07", "llama"): 2,
                subjects.fallback("gpu-07", "llama"): 2,
                subjects.forgotten("gpu-07"): 2,
                subjects.compute("gpu-08", "mistral"): 2,
                "placewatch.fallback.gpu-07.gpu-08.llama": 2,
                "placewatch.compute.gpu-07.gpu-08.llama": 2,
            }
        finally:
            await view.stop()
            await nc.close()

    anyio.run(scenario, backend="asyncio")
    logged = [r.getMessage() for r in caplog.records if r.name == "placewatch.consumer.impostors"]
    assert len(logged) == 10  # the first of each subject
    assert logged[1].startswith(
        "ignored a NodeTelemetry on placewatch.telemetry.gpu-07: it names node 'gpu-08', not "
        "its subject's; whoever publishes there speaks for another node"
    )
    assert logged[-3].startswith(
        "ignored a ComputeStatus on placewatch.compute.gpu-08.mistral: it names shard 'llama' "
        "of node 'gpu-08', not its subject's"
    )
    assert logged[-1] == (
        "ignored a ComputeStatus on placewatch.compute.gpu-07.gpu-08.llama: it names shard "
        "'llama' of node 'gpu-08', but its subject is not one the contract gives it (a token "
        "more or less than the contract's: whoever publishes there adds tokens to a subject of "
        "its own); docs/subjects.md, One node, one name"
    )
    assert all("docs/subjects.md, One node, one name" in line for line in logged)
