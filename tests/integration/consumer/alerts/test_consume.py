"""`placewatch alerts`: fallback events delivered to stdout or a webhook, acknowledged once
delivered, each delivered once across restarts."""

from __future__ import annotations

import functools
import gc
import json
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import msgspec
import nats
import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from placewatch.consumer.alerts import DEFAULT_DURABLE, StdoutSink, consume
from placewatch.lifecycle import drain
from placewatch.schemas import ComputeStatus, FallbackEvent, encode, subjects
from placewatch.schemas.codec import HEADER_SCHEMA
from placewatch.schemas.streams import COMPUTE, EVENTS

from tests.conftest import NatsServer, run_placewatch
from tests.support.alerts_cli import Alerts
from tests.support.eventually import eventually_async
from tests.support.fallback_events import FIRING, LABELS, MOVED, RESOLVED, T2
from tests.support.fleet_node import NODE, ShardNode
from tests.support.http_endpoint import Endpoint


def test_a_stop_while_the_webhook_answers_lets_that_delivery_finish(
    node: ShardNode, alerts: list[Alerts]
) -> None:
    slow = Endpoint(delay=1.0)
    try:
        node.start()
        node.wait_published()
        alerts.append(Alerts("--nats", node.url, "--webhook", slow.url))
        slow.wait(1)  # the POST is in; its answer comes a second later
        code, _, err = alerts[-1].stop()
        assert code == 0, err
        # Restarted, it does not post the firing event again: the resolved one comes next.
        alerts.append(Alerts("--nats", node.url, "--webhook", slow.url))
        node.idle_on_gpu(True)
        slow.wait(2)
        assert [b["state"] for b in slow.delivered()] == ["firing", "resolved"]
        code, _, err = alerts[-1].stop()
        assert code == 0, err
    finally:
        slow.close()


def test_alerts_webhook_delivers_firing_then_resolved_and_nothing_twice_after_a_restart(
    node: ShardNode, webhook: Endpoint, alerts: list[Alerts]
) -> None:
    node.start()
    node.wait_published()
    alerts.append(Alerts("--nats", node.url, "--webhook", webhook.url))
    (firing,) = webhook.wait(1)
    assert firing["state"] == "firing"
    assert firing["status"]["node"] == NODE and firing["status"]["shard"] == "idle"
    assert firing["status"]["verdict"] == "cpu_fallback"

    node.idle_on_gpu(True)
    resolved = webhook.wait(2)[1]
    assert (resolved["state"], resolved["status"]["verdict"]) == ("resolved", "gpu")
    code, _, err = alerts[-1].stop()
    assert code == 0, err

    # While it is away the shard falls back again; restarted, it delivers that one only.
    node.idle_on_gpu(False)
    node.wait_fallback_events(3)
    alerts.append(Alerts("--nats", node.url, "--webhook", webhook.url))
    third = webhook.wait(3)[2]
    assert third["state"] == "firing"
    assert third["status"]["time"] > resolved["status"]["time"]
    time.sleep(1.5)
    assert [b["state"] for b in webhook.delivered()] == ["firing", "resolved", "firing"]
    code, _, err = alerts[-1].stop()
    assert code == 0, err
    node.stop()


def test_alerts_waits_for_the_stream_retries_a_failing_webhook_and_delivers_once_it_recovers(
    node: ShardNode, alerts: list[Alerts]
) -> None:
    hook = Endpoint(failures=3)
    try:
        alerts.append(Alerts("--nats", node.url, "--webhook", hook.url))  # before any worker
        alerts[-1].wait_for("does not exist yet; waiting for a worker to create it")
        node.start()
        (event,) = hook.wait(1, timeout=25)
        assert [code for code, _ in hook.posts] == [500, 500, 500, 200]
        assert all(body == event for _, body in hook.posts)  # the same event, not lost
        assert (event["state"], event["status"]["shard"]) == ("firing", "idle")

        async def consumer_state() -> tuple[int, int, int]:
            # The webhook records the POST before it answers it: the acknowledgement follows
            # the answer, so it is waited for (5 s), not read at once.
            nc = await nats.connect(node.url)
            try:
                with anyio.move_on_after(5):
                    while True:
                        info = await nc.jetstream().consumer_info(EVENTS.name, "placewatch-alerts")
                        assert info.ack_floor is not None
                        if not info.num_ack_pending:
                            break
                        await anyio.sleep(0.05)
                return info.num_ack_pending or 0, info.num_pending or 0, info.ack_floor.stream_seq
            finally:
                await nc.close()

        ack_pending, pending, floor = anyio.run(consumer_state, backend="asyncio")
        assert (ack_pending, pending) == (0, 0) and floor > 0  # acknowledged once delivered
        code, _, err = alerts[-1].stop()
        assert code == 0, err
        assert f"stream {EVENTS.name} does not exist yet; waiting" in err
        assert "not delivered (HTTP 500 Internal Server Error); again in 0.5 s" in err
    finally:
        hook.close()
    node.stop()


def publish(url: str, *messages: FallbackEvent | ComputeStatus, encoding: str = "json") -> None:
    anyio.run(_publish, url, messages, encoding, backend="asyncio")


async def _publish(
    url: str, messages: Sequence[FallbackEvent | ComputeStatus], encoding: str
) -> None:
    """Fallback events and statuses into the events stream, and each status into the compute
    bucket, as a worker publishes them."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=EVENTS.name, subjects=subjects.all_events()))
        kv = await js.create_key_value(bucket=COMPUTE.name)
        for message in messages:
            payload, headers = encode(message, encoding)  # type: ignore[arg-type]
            if isinstance(message, FallbackEvent):
                s = message.status
                await js.publish(subjects.fallback(s.node, s.shard), payload, headers=headers)
                continue
            subject = subjects.compute(message.node, message.shard)
            await js.publish(subject, payload, headers=headers)
            await kv.put(subjects.shard_key(message.node, message.shard), payload)
    finally:
        await nc.close()


def alertmanager_args(server: NatsServer, webhook: Endpoint) -> tuple[str, ...]:
    """`placewatch alerts` posting Alertmanager's alerts to `webhook` from `server`."""
    return ("--nats", server.url, "--webhook", webhook.url, "--format", "alertmanager")


def firing_labels(body: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [a["labels"] for a in body if "endsAt" not in a]


def test_alertmanager_format_resends_firing_and_resolves_it_after_a_restart(
    nats_server: NatsServer, webhook: Endpoint, alerts: list[Alerts]
) -> None:
    publish(nats_server.url, FIRING, FIRING.status)
    args = alertmanager_args(nats_server, webhook)
    alerts.append(Alerts(*args, "--resend", "0.5"))
    first, again = webhook.wait(2)
    assert firing_labels(first) == firing_labels(again) == [LABELS]
    assert first[0]["startsAt"] == "2026-11-30T06:00:01.250000Z"
    assert len(again) == 1  # a resend posts what fires, nothing else
    code, _, err = alerts[-1].stop()
    assert code == 0, err

    # Resolved while it was away: restarted, it still knows which verdict fired.
    publish(nats_server.url, RESOLVED, RESOLVED.status, encoding="msgpack")
    count = len(webhook.delivered())
    alerts.append(Alerts(*args, "--resend", "0.5"))
    (resolved,) = webhook.wait(count + 1)[count]
    assert resolved["labels"] == LABELS
    assert (resolved["startsAt"], resolved["endsAt"]) == (
        "2026-11-30T06:00:01.250000Z",
        "2026-11-30T06:07:30Z",
    )
    time.sleep(1.2)
    assert len(webhook.delivered()) == count + 1  # nothing firing: nothing to resend
    code, _, err = alerts[-1].stop()
    assert code == 0, err


def test_alertmanager_format_follows_a_verdict_change_that_is_only_a_status(
    nats_server: NatsServer, webhook: Endpoint, alerts: list[Alerts]
) -> None:
    publish(nats_server.url, FIRING, FIRING.status)
    args = alertmanager_args(nats_server, webhook)
    alerts.append(Alerts(*args, "--label", "team=inference", "--resend", "0"))
    webhook.wait(1)
    publish(nats_server.url, MOVED)
    _, moved = webhook.wait(2)
    assert [(a["labels"]["verdict"], "endsAt" in a) for a in moved] == [
        ("cpu_fallback", True),
        ("misplaced", False),
    ]
    assert moved[1]["labels"] == LABELS | {
        "verdict": "misplaced",
        "severity": "warning",
        "team": "inference",
    }
    assert moved[1]["annotations"]["description"] == MOVED.reason
    code, _, err = alerts[-1].stop()
    assert code == 0, err


def test_alertmanager_format_resolves_a_shard_whose_node_clock_stepped_back(
    nats_server: NatsServer, webhook: Endpoint, alerts: list[Alerts]
) -> None:
    # The shard fell back at 06:00:01 by its node's clock; NTP then steps that clock back an
    # hour, and the shard is placed right again "at 05:07:30": stored later, so newer.
    publish(nats_server.url, FIRING, FIRING.status)
    args = alertmanager_args(nats_server, webhook)
    alerts.append(Alerts(*args, "--resend", "0"))
    webhook.wait(1)
    back = msgspec.structs.replace(RESOLVED.status, time=T2 - timedelta(hours=1))
    publish(nats_server.url, FallbackEvent(state="resolved", status=back), back)
    (ended,) = webhook.wait(2)[1]
    assert ended["labels"] == LABELS
    assert (ended["startsAt"], ended["endsAt"]) == (
        "2026-11-30T06:00:01.250000Z",
        "2026-11-30T06:00:01.250000Z",  # it cannot end before it started
    )
    code, _, err = alerts[-1].stop()
    assert code == 0, err
    # Restarted, the bucket's status (stored last) says it resolved: nothing fires again.
    count = len(webhook.delivered())
    alerts.append(Alerts(*args, "--resend", "0.3"))
    alerts[-1].wait_for("delivering fallback events")  # synced: what it posts from now on
    time.sleep(1.0)  # three resends' time, in which nothing may fire
    assert [a for body in webhook.delivered()[count:] for a in body if "endsAt" not in a] == []
    code, _, err = alerts[-1].stop()
    assert code == 0, err


def test_a_durable_consumer_made_for_json_follows_statuses_once_the_format_is_alertmanager(
    nats_server: NatsServer, webhook: Endpoint, alerts: list[Alerts]
) -> None:
    publish(nats_server.url, FIRING, FIRING.status)
    alerts.append(Alerts("--nats", nats_server.url, "--webhook", webhook.url))
    webhook.wait(1)
    code, _, err = alerts[-1].stop()
    assert code == 0, err
    publish(nats_server.url, MOVED)
    args = alertmanager_args(nats_server, webhook)
    alerts.append(Alerts(*args, "--resend", "0"))
    body = webhook.wait(2)[1]  # at start: what is true now, from the bucket
    assert firing_labels(body) == [LABELS | {"verdict": "misplaced", "severity": "warning"}]
    time.sleep(1)
    code, _, err = alerts[-1].stop()
    assert code == 0, err
    assert len(webhook.delivered()) == 2  # the position kept: nothing delivered twice
    assert (
        "consumer placewatch-alerts now follows placewatch.compute.>, placewatch.fallback.>" in err
    )


def test_a_stop_after_many_expired_pulls_drains_at_once_without_a_traceback(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Pull requests that expired while it waited (every 5 s) left nats-py a queued message
    # nobody takes; a drain then hung on it, was cancelled mid-flush, and logged tracebacks.
    publish(nats_server.url, FIRING)

    async def main() -> tuple[float, bool]:
        nc = await nats.connect(nats_server.url)
        ready = anyio.Event()
        deliver = functools.partial(consume, fetch_wait_s=0.05)
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                deliver, nc, subjects.DEFAULT_PREFIX, DEFAULT_DURABLE, StdoutSink(), ready
            )
            await ready.wait()
            asked = nc.stats["out_msgs"]
            await eventually_async(
                lambda: nc.stats["out_msgs"] >= asked + 10, what="ten pull requests, most expired"
            )
            tg.cancel_scope.cancel()  # as SIGTERM stops `placewatch alerts`
        started = time.monotonic()
        await drain(nc)
        return time.monotonic() - started, nc.is_closed

    with caplog.at_level(logging.WARNING):
        took, closed = anyio.run(main, backend="asyncio")
        gc.collect()  # a future whose exception nobody retrieved says so as it goes
    assert closed and took < 2  # drained, not given up on
    assert [r.getMessage() for r in caplog.records] == []


def test_alerts_without_a_webhook_writes_one_json_line_per_event(
    nats_server: NatsServer, alerts: list[Alerts]
) -> None:
    publish(nats_server.url, FIRING, RESOLVED)
    events, _ = two_lines(nats_server.url, alerts)
    assert [(e["state"], e["status"]["verdict"]) for e in events] == [
        ("firing", "cpu_fallback"),
        ("resolved", "gpu"),
    ]
    assert events[0]["status"]["time"] == "2026-11-30T06:00:01.250000Z"


def test_an_event_that_names_another_node_than_its_subject_is_skipped_and_the_rest_delivered(
    nats_server: NatsServer, alerts: list[Alerts]
) -> None:
    # gpu-08's subject carries gpu-07's firing event, ten times: gpu-08 speaking for gpu-07.
    publish(nats_server.url, FIRING)
    for _ in range(10):
        anyio.run(_publish_on, nats_server.url, subjects.fallback("gpu-08", "llama-8b-a"), FIRING)
    publish(nats_server.url, RESOLVED)
    events, err = two_lines(nats_server.url, alerts)
    assert [(e["state"], e["status"]["node"]) for e in events] == [
        ("firing", "gpu-07"),
        ("resolved", "gpu-07"),
    ]
    why = (
        "it names shard 'llama-8b-a' of node 'gpu-07', not its subject's; whoever publishes "
        "there speaks for another node (docs/subjects.md, One node, one name)"
    )
    # Logged at the first and the tenth, not each: a node may publish there without end.
    assert [line.split("skipped ", 1)[1] for line in err.splitlines() if "skipped " in line] == [
        f"message 2 on placewatch.fallback.gpu-08.llama-8b-a: {why}",
        f"message 11 on placewatch.fallback.gpu-08.llama-8b-a: {why} (10 skipped on this "
        "subject; logged at 1, 10, 100 ...)",
    ]


def test_a_message_that_is_no_event_of_this_schema_is_skipped_and_the_rest_delivered(
    nats_server: NatsServer, alerts: list[Alerts]
) -> None:
    subject, other = subjects.fallback("gpu-07", "llama-8b-a"), subjects.fallback("gpu-07", "b")
    newer, headers = encode(
        msgspec.structs.replace(FIRING, status=msgspec.structs.replace(FIRING.status, shard="b"))
    )
    publish(nats_server.url, FIRING)
    anyio.run(_publish_bytes, nats_server.url, subject, b'{"schema": 2, "state": "fir', {})
    anyio.run(_publish_bytes, nats_server.url, subject, b"[]", {})  # counted, not logged
    anyio.run(_publish_bytes, nats_server.url, other, newer, {**headers, HEADER_SCHEMA: "3"})
    publish(nats_server.url, RESOLVED)
    events, err = two_lines(nats_server.url, alerts)
    assert [e["state"] for e in events] == ["firing", "resolved"]
    skipped = [line.split("skipped ", 1)[1] for line in err.splitlines() if "skipped " in line]
    assert skipped == [
        f"message 2 on {subject}: not a valid FallbackEvent (application/json): Input data was "
        "truncated",
        f"message 4 on {other}: a FallbackEvent of schema 3, newer than this reader's 2: "
        "upgrade placewatch (docs/subjects.md, Changes)",
    ]


def two_lines(url: str, alerts: list[Alerts]) -> tuple[list[dict[str, Any]], str]:
    """`placewatch alerts` writing to stdout: its first two lines, each an event, and what it
    logged, once stopped (exiting 0 with nothing more written)."""
    alerts.append(Alerts("--nats", url, "--durable", "ops-log"))
    proc = alerts[-1].proc
    assert proc.stdout is not None
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    code, rest, err = alerts[-1].stop()
    assert code == 0, err
    assert rest == ""
    return [json.loads(line) for line in lines], err


async def _publish_on(url: str, subject: str, message: FallbackEvent) -> None:
    await _publish_bytes(url, subject, *encode(message))


async def _publish_bytes(url: str, subject: str, payload: bytes, headers: dict[str, str]) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subject, payload, headers=headers or None)
    finally:
        await nc.close()


def test_alerts_refuses_a_durable_consumer_that_follows_other_subjects(
    nats_server: NatsServer,
) -> None:
    async def other_consumer() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name=EVENTS.name, subjects=subjects.all_events()))
            await js.add_consumer(
                EVENTS.name,
                ConsumerConfig(durable_name="taken", filter_subject="placewatch.compute.>"),
            )
        finally:
            await nc.close()

    anyio.run(other_consumer, backend="asyncio")
    done = run_placewatch("alerts", "--nats", nats_server.url, "--durable", "taken")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "placewatch: consumer taken exists on PLACEWATCH_EVENTS with filter "
        "'placewatch.compute.>', not 'placewatch.fallback.>'; pick another --durable or "
        "remove it (nats consumer rm PLACEWATCH_EVENTS taken)"
    )


def test_no_secret_of_the_webhook_url_reaches_the_output(
    nats_server: NatsServer, alerts: list[Alerts]
) -> None:
    secret = "s3cret-hook-token"
    refused = run_placewatch(
        "alerts", "--nats", nats_server.url, "--webhook", f"ftp://ops:{secret}@h/?sig={secret}"
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        "placewatch: --webhook 'ftp://***@h/?sig=***': give an http:// or https:// URL\n"
    )
    hook = Endpoint(failures=1)
    try:
        publish(nats_server.url, FIRING)
        url = f"{hook.url}?token={secret}&x=1"
        alerts.append(Alerts("--nats", nats_server.url, "--webhook", url))
        hook.wait(1)
        code, out, err = alerts[-1].stop()
    finally:
        hook.close()
    assert code == 0, err
    assert [r.path for r in hook.requests] == [f"/hook?token={secret}&x=1"] * 2
    assert f"posting each fallback event to {hook.url}?token=***&x=1 (json)" in err
    assert "not delivered (HTTP 500 Internal Server Error)" in err
    assert secret not in out + err
