"""The placements watch against a real nats-server: the latest values, then each change,
and afresh when the server loses its consumer or restarts."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import anyio
import nats
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from placewatch.schemas.streams import PLACEMENTS
from placewatch.worker import runtime
from placewatch.worker.bus.bucket import PlacementsBucket
from placewatch.worker.bus.streams import StreamSettings

from tests.conftest import NatsServer
from tests.support.eventually import eventually_async


def spec(shard: str, gpu: int) -> bytes:
    return json.dumps({"id": shard, "pid": 100 + gpu, "gpus": [gpu]}).encode()


async def consumers(nc: Client) -> list[str]:
    return [c.name for c in await nc.jetstream().consumers_info(PLACEMENTS.stream)]


Body = Callable[[Client, KeyValue], Awaitable[None]]


def watching(
    url: str, bucket: PlacementsBucket, written: Sequence[tuple[str, bytes | None]], body: Body
) -> None:
    """Write `written` into a fresh bucket (None deletes the key), then run `body` with the
    watch running."""

    async def main() -> None:
        admin = await nats.connect(url)
        node = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            kv = await admin.jetstream().create_key_value(bucket=PLACEMENTS.name)
            for key, value in written:
                if value is None:
                    await kv.delete(key)
                else:
                    await kv.put(key, value)
            async with anyio.create_task_group() as tg:
                tg.start_soon(bucket.follow, node)
                await eventually_async(lambda: bucket.ready)
                await body(admin, kv)
                tg.cancel_scope.cancel()
        finally:
            await node.close()
            await admin.close()

    anyio.run(main, backend="asyncio")


def test_latest_values_of_this_node_then_each_change(nats_server: NatsServer) -> None:
    bucket = PlacementsBucket("n1")
    written = [
        ("n1.a", spec("a", 0)),
        ("n1.a", spec("a", 1)),  # only the latest counts
        ("n1.b", b"{not json"),
        ("n1.c", spec("c", 2)),
        ("n1.c", None),
        ("n2.x", spec("x", 3)),  # another node's
    ]

    async def body(admin: Client, kv: KeyValue) -> None:
        assert {k: s.gpus for k, s in bucket.specs.items()} == {"n1.a": [1]}
        assert list(bucket.problems) == ["n1.b"]
        await kv.put("n1.d", spec("d", 4))
        await eventually_async(lambda: "n1.d" in bucket.specs)
        await kv.put("n1.a", spec("a", 5))
        await eventually_async(lambda: bucket.specs["n1.a"].gpus == [5])
        await kv.put("n1.b", spec("b", 6))
        await eventually_async(lambda: "n1.b" in bucket.specs)
        assert bucket.problems == {}
        await kv.delete("n1.a")
        await kv.purge("n1.d")
        await eventually_async(lambda: set(bucket.specs) == {"n1.b"})
        await kv.put("n2.y", spec("y", 7))
        await kv.put("n1.e", spec("e", 0))  # after n2.y: once it is in, n2.y was passed over
        await eventually_async(lambda: "n1.e" in bucket.specs)
        assert set(bucket.specs) == {"n1.b", "n1.e"}
        assert len(await consumers(admin)) == 1

    watching(nats_server.url, bucket, written, body)


def test_an_empty_bucket_is_ready_at_once_and_a_quiet_one_stays_put(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="placewatch.worker.bus.bucket")
    bucket = PlacementsBucket("n1", heartbeat=0.2)

    async def body(admin: Client, kv: KeyValue) -> None:
        assert bucket.specs == {} and bucket.problems == {}
        first = await consumers(admin)
        await anyio.sleep(2)  # ten heartbeats: each one says nothing was missed
        assert await consumers(admin) == first
        await kv.put("n1.a", spec("a", 1))
        await eventually_async(lambda: "n1.a" in bucket.specs)

    watching(nats_server.url, bucket, [], body)
    assert "reading the latest values again" not in caplog.text


def test_a_lost_consumer_is_noticed_and_the_values_read_afresh(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="placewatch.worker.bus.bucket")
    bucket = PlacementsBucket("n1", heartbeat=0.2)
    written = [("n1.a", spec("a", 1)), ("n1.b", spec("b", 2)), ("n1.c", spec("c", 4))]

    async def body(admin: Client, kv: KeyValue) -> None:
        assert set(bucket.specs) == {"n1.a", "n1.b", "n1.c"}
        [lost] = await consumers(admin)
        await admin.jetstream().delete_consumer(PLACEMENTS.stream, lost)
        await kv.put("n1.a", spec("a", 3))  # nobody delivers these now
        await kv.delete("n1.b")
        await eventually_async(
            lambda: set(bucket.specs) == {"n1.a", "n1.c"} and bucket.specs["n1.a"].gpus == [3]
        )
        [found] = await consumers(admin)
        assert found != lost

    watching(nats_server.url, bucket, written, body)
    assert "placements watch: no word from the server in 0.5 s" in caplog.text
    assert "placement n1.b removed" in caplog.text
    assert "placement n1.a: a on GPUs [3]" in caplog.text
    assert caplog.text.count("placement n1.c: c on GPUs [4]") == 1  # unchanged: not again


def test_a_server_restart_is_survived(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="placewatch.worker.bus.bucket")
    bucket = PlacementsBucket("n1", heartbeat=0.2)

    async def body(admin: Client, kv: KeyValue) -> None:
        await anyio.to_thread.run_sync(nats_server.stop)
        await anyio.to_thread.run_sync(nats_server.start)  # same port, same store
        with anyio.fail_after(10):
            while True:  # the admin connection is back once a put goes through
                try:
                    await kv.put("n1.b", spec("b", 2))
                    break
                except (nats.errors.Error, TimeoutError):
                    await anyio.sleep(0.1)
        await eventually_async(lambda: set(bucket.specs) == {"n1.a", "n1.b"})

    watching(nats_server.url, bucket, [("n1.a", spec("a", 1))], body)
    assert "placements watch: no word from the server" in caplog.text  # its consumer went too


def test_retries_wait_longer_each_time_and_start_over_after_a_watch_that_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A server without JetStream: every try fails at once. The clock says the fourth
    # try ran a minute before it failed, as a watch that had been following would.
    caplog.set_level(logging.DEBUG, logger="placewatch.worker.runtime")
    server = NatsServer(tmp_path / "store", jetstream=False)
    server.start()
    ran = iter([0, 0, 0, 0, 0, 0, 0, 60, 60, 60])
    monkeypatch.setattr(runtime, "time", SimpleNamespace(monotonic=lambda: next(ran)))
    pauses: list[float] = []

    class Enough(Exception):
        pass

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 5:
            raise Enough

    monkeypatch.setattr("placewatch.backoff.anyio", SimpleNamespace(sleep=sleep))

    async def main() -> None:
        nc = await nats.connect(server.url)
        try:
            with pytest.raises(Enough):
                await runtime._follow_placements(PlacementsBucket("gpu-07"), nc, StreamSettings())
        finally:
            await nc.close()

    try:
        anyio.run(main, backend="asyncio")
    finally:
        server.stop()
    first = runtime.RETRY_FIRST_S
    assert pauses == [first, 2 * first, 4 * first, first, 2 * first]
    # Each outage told once, at its first try, in words: the later tries only in debug.
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "cannot watch" in r.getMessage()]
    assert [level for level, _ in said] == [
        logging.WARNING,
        logging.DEBUG,
        logging.DEBUG,
        logging.WARNING,
        logging.DEBUG,
    ]
    assert said[0][1] == (
        "cannot watch KV placewatch_placements (the server has no JetStream: placements come "
        "from the shards file and discovery alone; enable it with nats-server -js); "
        f"retrying in {first:g} s, then at most every {runtime.RETRY_MOST_S:g} s"
    )
