"""Events reach the stream once, wait out an outage, and go core where there is no JetStream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import nats.errors
import pytest
from nats.aio.client import Client

from placewatch.schemas import ComputeStatus, decode, encode
from placewatch.schemas.streams import COMPUTE, EVENTS
from placewatch.worker.bus.events import EventTracker
from placewatch.worker.bus.outbox import EventOutbox, StoresAppeared

from tests.conftest import NatsServer, free_port
from tests.support.eventually import eventually_async
from tests.support.natsproto import RawSubscriber


def status(verdict: str = "cpu_fallback") -> ComputeStatus:
    return ComputeStatus(
        node="n1",
        shard="s",
        session="abc",
        time=datetime.now(UTC),
        placed_gpus=[1],
        verdict=verdict,  # type: ignore[arg-type]
    )


async def stored(nc: Client) -> int:
    info = await nc.jetstream().stream_info(EVENTS.name)
    return int(info.state.messages)


def connected(url: str, body: Callable[[Client], Awaitable[None]]) -> None:
    """Run `body` with a connection to `url`, closed after."""

    async def go() -> None:
        nc = await nats.connect(url)
        try:
            await body(nc)
        finally:
            await nc.close()

    anyio.run(go, backend="asyncio")


def test_a_retried_publish_is_stored_once_and_the_status_kept_in_kv(
    nats_server: NatsServer,
) -> None:
    async def go(nc: Client) -> None:
        outbox = EventOutbox(nc)
        items = EventTracker("n1", "abc").changes([status()])
        outbox.add(items)
        assert await outbox.flush() == 2
        outbox.add(items)  # the same events again, as a retry after a lost ack sends them
        assert await outbox.flush() == 2
        assert await stored(nc) == 2
        info = await nc.jetstream().stream_info(EVENTS.name)
        assert info.config.duplicate_window >= 120
        assert set(info.config.subjects or []) == {
            "placewatch.compute.>",
            "placewatch.fallback.>",
        }
        kv = await nc.jetstream().key_value(COMPUTE.name)
        entry = await kv.get("n1.s")
        assert entry.value is not None
        assert decode(entry.value, ComputeStatus).verdict == "cpu_fallback"

    connected(nats_server.url, go)


def test_stores_made_again_are_told_to_the_tick_once_until_it_takes_it(
    nats_server: NatsServer,
) -> None:
    async def go(nc: Client) -> None:
        outbox = EventOutbox(nc)
        outbox.add(EventTracker("n1", "abc").changes([status()]))
        assert await outbox.flush() == 2
        with pytest.raises(anyio.WouldBlock):  # the stores were there from the start
            outbox.appearances.receive_nowait()
        await nc.jetstream().delete_stream(EVENTS.name)
        await outbox.setup()  # made again, lacking what was said before
        await outbox.setup()  # there already: nothing new, and what waits is kept
        await nc.jetstream().delete_stream(EVENTS.name)
        await outbox.setup()  # made again before the tick took the first: one is enough
        assert outbox.appearances.receive_nowait() == StoresAppeared()
        with pytest.raises(anyio.WouldBlock):
            outbox.appearances.receive_nowait()

    connected(nats_server.url, go)


def test_events_wait_in_the_outbox_while_the_server_is_away(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", port=free_port())
    server.start()

    async def go() -> None:
        nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            outbox = EventOutbox(nc)
            server.stop()
            await eventually_async(lambda: not nc.is_connected, what="the client sees it gone")
            outbox.add(EventTracker("n1", "abc").changes([status()]))
            assert await outbox.flush() == 0
            assert len(outbox.pending) == 2
            server.start()
            await eventually_async(lambda: nc.is_connected, 10, what="the client back")
            assert await outbox.flush() == 2
            assert not outbox.pending
            assert await stored(nc) == 2
        finally:
            await nc.close()
            server.stop()

    anyio.run(go, backend="asyncio")


def test_without_jetstream_events_go_out_as_core_messages(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", jetstream=False)
    server.start()
    try:
        with RawSubscriber(server.url, "placewatch.>") as sub:

            async def go() -> EventOutbox:
                nc = await nats.connect(server.url)
                try:
                    outbox = EventOutbox(nc)
                    outbox.add(EventTracker("n1", "abc").changes([status()]))
                    assert await outbox.flush() == 2
                    return outbox
                finally:
                    await nc.close()

            outbox = anyio.run(go, backend="asyncio")
            assert outbox.core_only
            assert sub.next(timeout=3).subject == "placewatch.fallback.n1.s"
            compute = sub.next(timeout=3)
            assert compute.subject == "placewatch.compute.n1.s"
            assert compute.headers["Nats-Msg-Id"] == "n1.s.abc.1"
    finally:
        server.stop()


def test_previous_reads_this_nodes_latest_statuses_and_none_without_a_bucket(
    nats_server: NatsServer,
) -> None:
    async def go(nc: Client) -> None:
        outbox = EventOutbox(nc)
        assert await outbox.previous("n1") == []  # a first start: no bucket yet
        kv = await nc.jetstream().create_key_value(bucket=COMPUTE.name)
        for key, verdict in [("n1.a", "gpu"), ("n1.a", "cpu_fallback"), ("n1.b", "gpu")]:
            await kv.put(key, encode(msgspec.structs.replace(status(verdict), shard=key))[0])
        await kv.delete("n1.b")
        await kv.put("n1.c", b"{not a status")
        await kv.put("n2.a", encode(status("misplaced"))[0])  # another node's
        found = await outbox.previous("n1")
        assert [(s.shard, s.verdict) for s in found] == [("n1.a", "cpu_fallback")]
        with anyio.fail_after(5):  # the server removes the reading consumer once idle
            while (await nc.jetstream().stream_info(f"KV_{COMPUTE.name}")).state.consumer_count:
                await anyio.sleep(0.1)

    connected(nats_server.url, go)


def test_a_restart_reads_the_statuses_a_msgpack_worker_left(nats_server: NatsServer) -> None:
    # A bucket value carries no headers: what a worker running with msgpack stored there
    # must still be read back by its next session, which then knows what it left firing.
    async def go(nc: Client) -> None:
        outbox = EventOutbox(nc, encoding="msgpack")
        outbox.add(EventTracker("n1", "abc").changes([status()]))
        assert await outbox.flush() == 2
        found = await EventOutbox(nc, encoding="msgpack").previous("n1")
        assert [(s.shard, s.verdict, s.session) for s in found] == [("s", "cpu_fallback", "abc")]

    connected(nats_server.url, go)


def test_a_worker_stopped_between_an_event_and_its_status_says_the_event_again(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the compute bucket holds is what the next session believes was said. Stopped
    # after the firing event went out but before its status, the next session fires again;
    # the other way round, it would believe an event that never went out.
    async def go(nc: Client) -> None:
        outbox = EventOutbox(nc)
        outbox.add(EventTracker("n1", "abc").changes([status()]))
        await outbox.setup()
        publish = outbox.js.publish
        published: list[str] = []

        async def stopped_after_one(subject: str, *args: Any, **kwargs: Any) -> Any:
            if published and not subject.startswith("$KV."):  # a bucket put goes through
                raise nats.errors.ConnectionClosedError
            published.append(subject)
            return await publish(subject, *args, **kwargs)

        monkeypatch.setattr(outbox.js, "publish", stopped_after_one)
        await outbox.flush()
        tracker = EventTracker("n1", "def")
        tracker.seed(await EventOutbox(nc).previous("n1"))
        again = tracker.changes([status()])
        assert [o.subject for o in again] == [
            "placewatch.fallback.n1.s",
            "placewatch.compute.n1.s",
        ]
        assert published == ["placewatch.fallback.n1.s"]

    connected(nats_server.url, go)


async def soon(condition: Callable[[], bool], within: float = 5.0) -> None:
    with anyio.fail_after(within):
        while not condition():
            await anyio.sleep(0.05)


def test_the_streams_are_made_when_jetstream_appears_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    plain = NatsServer(tmp_path / "js", port=port, jetstream=False)
    plain.start()
    with_js = NatsServer(tmp_path / "js", port=port)

    async def go() -> None:
        nc = await nats.connect(plain.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            outbox = EventOutbox(nc)
            async with anyio.create_task_group() as tg:
                tg.start_soon(outbox.keep_set_up, 0.2)
                await soon(lambda: outbox.core_only)
                outbox.add(EventTracker("n1", "s1").changes([status()]))
                assert await outbox.flush() == 2  # core: the fallback event and the status
                plain.stop()
                with_js.start()  # the same server, restarted with JetStream
                await soon(lambda: not outbox.core_only, within=10)
                tg.cancel_scope.cancel()
            outbox.add(EventTracker("n1", "s2").changes([status()]))
            assert await outbox.flush() == 2
            assert await stored(nc) == 2  # from then on, into the stream
        finally:
            await nc.close()

    caplog.set_level("WARNING", logger="placewatch.worker.bus.outbox")
    try:
        anyio.run(go, backend="asyncio")
    finally:
        with_js.stop()
        plain.stop()
    said = [r.getMessage() for r in caplog.records]
    assert (
        said.count(
            "the server has JetStream now: events go to the stream PLACEWATCH_EVENTS from here on"
        )
        == 1
    )
