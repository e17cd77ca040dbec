"""Telemetry published with the contract's headers; while the server is away a sample is
dropped and counted, and the next one that goes out says how many."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
import msgspec
import pytest
from nats.aio.client import Client

from placewatch.connection import connect
from placewatch.schemas import (
    GpuProcess,
    GpuSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    ShardReading,
    decode,
    lean,
)
from placewatch.worker.bus.publish import INVENTORY_REFRESH_S, Publisher

from tests.conftest import NatsServer
from tests.support.eventually import eventually_async
from tests.support.natsproto import Message, RawSubscriber


def sample(seq: int, node: str = "rack 4.gpu 7", shards: int = 1) -> NodeTelemetry:
    return NodeTelemetry(
        node=node,
        session="s1",
        seq=seq,
        time=datetime(2026, 11, 30, 5, 0, seq % 60, tzinfo=UTC),
        interval_s=2.0,
        inventory="0a1b2c3d4e5f",
        shards={f"shard-{n:06d}": ShardReading(verdict="gpu") for n in range(shards)},
    )


def inventory(pids: tuple[int, ...] = (4242,)) -> NodeInventory:
    gpu = GpuSample(index=0, uuid="GPU-1", processes=[GpuProcess(pid=p) for p in pids])
    whole = NodeSample(
        node="rack 4.gpu 7",
        session="s1",
        seq=0,
        time=datetime(2026, 11, 30, 5, 0, tzinfo=UTC),
        interval_s=2.0,
        gpus=[gpu],
    )
    return lean.split(whole)[0]


def connected(url: str, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        nc = await connect([url], "test publisher")
        try:
            await body(nc)
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")


async def received(sub: RawSubscriber) -> Message:
    return await anyio.to_thread.run_sync(sub.next, 5)


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_sample_goes_out_on_its_nodes_subject_with_the_contract_headers(
    nats_server: NatsServer, encoding: str
) -> None:
    async def body(nc: Client) -> None:
        publisher = Publisher(nc, "pw", encoding)  # type: ignore[arg-type]
        with RawSubscriber(nats_server.url, "pw.telemetry.>") as sub:
            assert await publisher.telemetry(sample(0)) is True
            await nc.flush()
            msg = await received(sub)
        assert msg.subject == "pw.telemetry.rack=204=2Egpu=207"
        assert msg.headers == {
            "Content-Type": f"application/{encoding}",
            "Placewatch-Type": "NodeTelemetry",
            "Placewatch-Schema": "2",
        }
        assert decode(msg.payload, NodeTelemetry, msg.headers) == sample(0)

    connected(nats_server.url, body)


def test_samples_dropped_while_disconnected_are_counted_in_the_next_one(
    nats_server: NatsServer,
) -> None:
    async def body(nc: Client) -> None:
        publisher = Publisher(nc, "placewatch")
        await anyio.to_thread.run_sync(nats_server.stop)
        await eventually_async(lambda: not nc.is_connected)
        assert [await publisher.telemetry(sample(n)) for n in (1, 2, 3)] == [False] * 3
        assert publisher.dropped == 3
        await anyio.to_thread.run_sync(nats_server.start)  # same port, same store
        await eventually_async(lambda: nc.is_connected)
        with RawSubscriber(nats_server.url, "placewatch.telemetry.*") as sub:
            assert await publisher.telemetry(sample(4)) is True
            assert await publisher.telemetry(sample(5)) is True
            await nc.flush()
            first, second = await received(sub), await received(sub)
        assert publisher.dropped == 0
        told = decode(first.payload, NodeTelemetry, first.headers)
        assert (told.seq, told.dropped) == (4, 3)
        assert told == msgspec.structs.replace(sample(4), dropped=3)
        after = decode(second.payload, NodeTelemetry, second.headers)
        assert (after.seq, after.dropped) == (5, 0)

    connected(nats_server.url, body)


def test_a_sample_larger_than_the_max_payload_goes_out_trimmed_saying_so(
    nats_server: NatsServer,
) -> None:
    async def body(nc: Client) -> None:
        publisher = Publisher(nc, "placewatch")
        too_big = sample(1, shards=40_000)  # 1.4 MB of JSON
        with RawSubscriber(nats_server.url, "placewatch.telemetry.*") as sub:
            assert await publisher.telemetry(too_big) is True
            await nc.flush()
            msg = await received(sub)
        assert len(msg.payload) < nc.max_payload
        got = decode(msg.payload, NodeTelemetry, msg.headers)
        assert got.omitted == {"shards": 20_000}
        assert list(got.shards) == [f"shard-{n:06d}" for n in range(20_000)]
        note = got.sources[-1]
        assert (note.name, note.ok) == ("telemetry", False)
        assert note.error == (
            f"trimmed to fit the server's max_payload ({nc.max_payload} bytes): left out 20000 "
            "shards; raise max_payload, or place fewer shards on this node"
        )
        assert publisher.dropped == 0

    connected(nats_server.url, body)


def test_the_inventory_goes_out_when_it_changes_and_every_ten_minutes(
    nats_server: NatsServer,
) -> None:
    now = [1000.0]

    async def body(nc: Client) -> None:
        publisher = Publisher(nc, "placewatch", clock=lambda: now[0])
        first, started = inventory(), inventory((4242, 5151))
        with RawSubscriber(nats_server.url, "placewatch.inventory.*") as sub:
            assert await publisher.inventory(first) is True
            now[0] += 2
            assert await publisher.inventory(first) is True  # out already: not again
            assert await publisher.inventory(started) is True  # a process started
            now[0] += INVENTORY_REFRESH_S
            assert await publisher.inventory(started) is True  # ten minutes on: again
            await nc.flush()
            got = [await received(sub) for _ in range(3)]
            with pytest.raises(TimeoutError):
                sub.next(0.3)
        assert {m.subject for m in got} == {"placewatch.inventory.rack=204=2Egpu=207"}
        assert {m.headers["Placewatch-Type"] for m in got} == {"NodeInventory"}
        ids = [decode(m.payload, NodeInventory, m.headers).id for m in got]
        assert ids == [first.id, started.id, started.id] and first.id != started.id
        assert sorted(decode(got[1].payload, NodeInventory, got[1].headers).processes) == [
            4242,
            5151,
        ]

    connected(nats_server.url, body)


def test_an_inventory_not_published_is_published_at_the_next_tick(
    nats_server: NatsServer,
) -> None:
    async def body(nc: Client) -> None:
        publisher = Publisher(nc, "placewatch")
        await anyio.to_thread.run_sync(nats_server.stop)
        await eventually_async(lambda: not nc.is_connected)
        assert await publisher.inventory(inventory()) is False
        await anyio.to_thread.run_sync(nats_server.start)
        await eventually_async(lambda: nc.is_connected)
        with RawSubscriber(nats_server.url, "placewatch.inventory.*") as sub:
            assert await publisher.inventory(inventory()) is True
            await nc.flush()
            msg = await received(sub)
        assert decode(msg.payload, NodeInventory, msg.headers) == inventory()

    connected(nats_server.url, body)
