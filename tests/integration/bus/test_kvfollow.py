"""Following a KV bucket on a real server: the latest value of each key once all are in,
then every change, deletes and purges as None; a reason when a change may have been missed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from placewatch.worker.bus.kvfollow import CONSUMER_PREFIX, Values, follow

from tests.conftest import NatsServer
from tests.support.eventually import eventually_async

BUCKET = "test_follow"


def with_bucket(
    url: str,
    written: list[tuple[str, bytes | None]],
    body: Callable[[Client, KeyValue], Awaitable[None]],
) -> None:
    """Write `written` into a fresh bucket (None deletes the key), then run `body`."""

    async def main() -> None:
        nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            kv = await nc.jetstream().create_key_value(bucket=BUCKET)
            for key, value in written:
                if value is None:
                    await kv.delete(key)
                else:
                    await kv.put(key, value)
            await body(nc, kv)
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")


async def consumers(nc: Client) -> list[str]:
    return [c.name for c in await nc.jetstream().consumers_info(f"KV_{BUCKET}")]


async def gone(nc: Client, seconds: float) -> None:
    """Until the bucket's stream has no consumer; fails after `seconds`."""
    with anyio.fail_after(seconds):
        while await consumers(nc):
            await anyio.sleep(0.1)


def test_latest_values_of_the_keys_asked_then_it_returns(nats_server: NatsServer) -> None:
    written: list[tuple[str, bytes | None]] = [
        ("n1.a", b"1"),
        ("n1.a", b"2"),  # only the latest counts
        ("n1.b", b"x"),
        ("n1.b", None),  # deleted: there, as None
        ("n2.c", b"3"),  # not asked for
    ]

    async def body(nc: Client, kv: KeyValue) -> None:
        got: list[Values] = []
        reason = await follow(nc, BUCKET, "n1.*", heartbeat=1.0, latest=got.append)
        assert reason == ""
        assert got == [{"n1.a": b"2", "n1.b": None}]
        # Named, so that its create subject carries the filter a node's credentials allow.
        [made] = await nc.jetstream().consumers_info(f"KV_{BUCKET}")
        assert made.name.startswith(CONSUMER_PREFIX) and len(made.name) == len(CONSUMER_PREFIX) + 16
        assert made.config.filter_subject == f"$KV.{BUCKET}.n1.*"
        assert made.config.inactive_threshold == 2.5
        await gone(nc, 5)  # the server removes it once nobody listens: no delete right needed

    with_bucket(nats_server.url, written, body)


def test_an_empty_bucket_gives_no_values_at_once(nats_server: NatsServer) -> None:
    async def body(nc: Client, kv: KeyValue) -> None:
        got: list[Values] = []
        assert await follow(nc, BUCKET, ">", heartbeat=1.0, latest=got.append) == ""
        assert got == [{}]

    with_bucket(nats_server.url, [], body)


def test_changes_after_the_latest_values_deletes_and_purges_as_none(
    nats_server: NatsServer,
) -> None:
    async def body(nc: Client, kv: KeyValue) -> None:
        got: list[Values] = []
        changes: list[tuple[str, bytes | None]] = []

        ended: list[str] = []

        async def following() -> None:
            # A heartbeat loose enough that a loaded machine (the suite's four workers on two
            # cores) does not end the follow for a late one: that is another test's.
            ended.append(
                await follow(
                    nc,
                    BUCKET,
                    "n1.*",
                    heartbeat=2.0,
                    latest=got.append,
                    change=lambda key, value: changes.append((key, value)),
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(following)
            await eventually_async(lambda: bool(got))
            await kv.put("n1.b", b"new")
            await kv.put("n2.x", b"other node")
            await kv.put("n1.a", b"again")
            await kv.delete("n1.a")
            await kv.purge("n1.b")
            await eventually_async(lambda: len(changes) == 4 or bool(ended))
            assert ended == [], f"the follow ended: {ended}"
            tg.cancel_scope.cancel()
        assert got == [{"n1.a": b"1"}]
        assert changes == [("n1.b", b"new"), ("n1.a", b"again"), ("n1.a", None), ("n1.b", None)]

    with_bucket(nats_server.url, [("n1.a", b"1")], body)


def test_a_server_restart_ends_the_follow_with_a_reason(nats_server: NatsServer) -> None:
    async def body(nc: Client, kv: KeyValue) -> None:
        got: list[Values] = []
        reasons: list[str] = []

        async def following() -> None:
            reason = await follow(
                nc, BUCKET, ">", heartbeat=0.2, latest=got.append, change=lambda k, v: None
            )
            reasons.append(reason)

        async with anyio.create_task_group() as tg:
            tg.start_soon(following)
            await eventually_async(lambda: bool(got))
            await anyio.to_thread.run_sync(nats_server.stop)
            await anyio.to_thread.run_sync(nats_server.start)  # same port, same store
            await eventually_async(lambda: bool(reasons))
        (reason,) = reasons
        # Its consumer was in memory: the restarted server never heard of it.
        assert reason == "no word from the server in 0.5 s"

    with_bucket(nats_server.url, [("n1.a", b"1")], body)


def test_a_bucket_that_does_not_exist_raises(nats_server: NatsServer) -> None:
    async def main() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            with pytest.raises(nats.errors.Error) as caught:
                await follow(nc, "no_such_bucket", ">", heartbeat=1.0, latest=lambda v: None)
            assert isinstance(caught.value, nats.js.errors.NotFoundError)
            assert caught.value.description == "stream not found"
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")
