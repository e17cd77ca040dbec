"""The contract's streams and buckets made on a real server as the table says; one that
exists is kept as it is; with --no-create a missing one is an error naming the command."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import nats
import nats.js.errors
import pytest
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, StorageType, StreamConfig

from placewatch.schemas.streams import COMPUTE, EVENTS, MAX_CONSUMERS, PLACEMENTS, for_prefix
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream

from tests.conftest import NatsServer


def on_server(url: str, body: Callable[[JetStreamContext], Awaitable[None]]) -> None:
    async def main() -> None:
        nc = await nats.connect(url)
        try:
            await body(nc.jetstream())
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")


def test_missing_streams_are_created_as_the_table_says(nats_server: NatsServer) -> None:
    async def body(js: JetStreamContext) -> None:
        made = StreamSettings(storage="memory")
        await ensure_stream(js, for_prefix("pw").events, made)
        await ensure_stream(js, for_prefix("pw").telemetry, made)
        events = (await js.stream_info("PW_EVENTS")).config
        assert events.subjects == ["pw.compute.>", "pw.fallback.>"]
        assert (events.storage, events.num_replicas) == (StorageType.MEMORY, 1)
        assert events.duplicate_window == 300.0
        telemetry = (await js.stream_info("PW_TELEMETRY")).config
        assert telemetry.subjects == ["pw.telemetry.*", "pw.telemetry.*.*"]
        assert (telemetry.max_msgs_per_subject, telemetry.discard) == (1, DiscardPolicy.OLD)

    on_server(nats_server.url, body)


def test_what_the_worker_makes_takes_more_consumers_than_a_servers_default(
    nats_server: NatsServer,
) -> None:
    # nats-server 2.15 gives a stream made without a limit 1,000 consumers; every worker holds
    # one on the placements bucket, so a fleet of 1,001 nodes would have one refused.
    async def body(js: JetStreamContext) -> None:
        await ensure_bucket(js, PLACEMENTS, StreamSettings())
        await ensure_stream(js, EVENTS, StreamSettings())
        for stream, subject in (
            (PLACEMENTS.stream, "$KV.placewatch_placements.n"),
            (EVENTS.name, "placewatch.compute.n"),
        ):
            assert (await js.stream_info(stream)).config.max_consumers == MAX_CONSUMERS
            for i in range(1_001):
                config = ConsumerConfig(
                    name=f"node-{i}",
                    filter_subject=f"{subject}{i}.>",
                    ack_policy=AckPolicy.NONE,
                    mem_storage=True,
                )
                await js.add_consumer(stream, config)
            assert (await js.stream_info(stream)).state.consumer_count == 1_001

    on_server(nats_server.url, body)


def test_an_existing_stream_is_kept_as_it_is(nats_server: NatsServer) -> None:
    async def body(js: JetStreamContext) -> None:
        await js.add_stream(StreamConfig(name="PLACEWATCH_EVENTS", subjects=["ops.compute.>"]))
        await ensure_stream(js, EVENTS, StreamSettings())
        kept = (await js.stream_info("PLACEWATCH_EVENTS")).config
        assert kept.subjects == ["ops.compute.>"]

    on_server(nats_server.url, body)


def test_with_no_create_a_missing_stream_names_the_command_to_make_it(
    nats_server: NatsServer,
) -> None:
    async def body(js: JetStreamContext) -> None:
        settings = StreamSettings(create=False, replicas=3)
        with pytest.raises(nats.js.errors.NotFoundError) as caught:
            await ensure_stream(js, for_prefix("pw").events, settings)
        assert caught.value.description == (
            "stream PW_EVENTS does not exist and --no-create is set; create it "
            "(nats stream add PW_EVENTS --subjects 'pw.compute.>,pw.fallback.>' "
            "--storage file --replicas 3 --dupe-window 5m --max-consumers 1000000 --defaults) "
            "or let the worker create it"
        )
        assert await js.streams_info() == []

    on_server(nats_server.url, body)


def test_a_missing_bucket_is_created_and_its_values_kept(nats_server: NatsServer) -> None:
    async def body(js: JetStreamContext) -> None:
        kv = await ensure_bucket(js, COMPUTE, StreamSettings())
        await kv.put("n1.a", b"{}")
        assert (await kv.get("n1.a")).value == b"{}"
        # Read by direct get (a node may get its own key by subject); every node writes it,
        # so no message may roll the others up.
        made = (await js.stream_info(COMPUTE.stream)).config
        assert (made.allow_direct, made.allow_rollup_hdrs) == (True, False)
        with pytest.raises(nats.js.errors.APIError, match="rollup not permitted"):
            await js.publish("$KV.placewatch_compute.n2.x", b"", headers={"Nats-Rollup": "all"})
        assert (await kv.get("n1.a")).value == b"{}"
        await ensure_bucket(js, PLACEMENTS, StreamSettings())
        placements = (await js.stream_info(PLACEMENTS.stream)).config
        assert placements.allow_rollup_hdrs  # a control plane's, which may purge
        status = await kv.status()
        assert (status.bucket, status.history) == ("placewatch_compute", 1)
        assert (await js.stream_info("KV_placewatch_compute")).config.num_replicas == 1

    on_server(nats_server.url, body)


def test_an_existing_bucket_is_kept_with_its_history(nats_server: NatsServer) -> None:
    async def body(js: JetStreamContext) -> None:
        made = await js.create_key_value(bucket="placewatch_placements", history=5)
        await made.put("n1.a", b"1")
        kv = await ensure_bucket(js, PLACEMENTS, StreamSettings())
        assert (await kv.status()).history == 5
        assert (await kv.get("n1.a")).value == b"1"

    on_server(nats_server.url, body)


def test_with_no_create_a_missing_bucket_is_an_error(nats_server: NatsServer) -> None:
    async def body(js: JetStreamContext) -> None:
        with pytest.raises(nats.js.errors.BucketNotFoundError) as caught:
            await ensure_bucket(js, PLACEMENTS, StreamSettings(create=False, replicas=3))
        assert caught.value.description == (
            "KV bucket placewatch_placements does not exist and --no-create is set; create it "
            "(nats kv add placewatch_placements --history 1 --storage file --replicas 3 && nats "
            "stream edit KV_placewatch_placements --max-consumers 1000000 -f) "
            "or let the worker create it"
        )
        with pytest.raises(nats.js.errors.BucketNotFoundError):
            await js.key_value("placewatch_placements")

    on_server(nats_server.url, body)
