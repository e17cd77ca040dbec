"""Where `placewatch alerts` delivers: stdout, or a webhook (a real local HTTP server) in the
event's JSON or Alertmanager's body, firing alerts posted again until resolved."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import msgspec
import pytest

from placewatch.consumer.alerts.alertmanager import AlertTemplate
from placewatch.consumer.alerts.reconcile import Message
from placewatch.consumer.alerts.sinks import (
    MAX_ALERTS_PER_POST,
    AlertmanagerSink,
    StdoutSink,
    WebhookSink,
    resend_every,
)
from placewatch.consumer.alerts.webhook import DeliveryError
from placewatch.schemas import FallbackEvent

from tests.support.eventually import eventually_async
from tests.support.fallback_events import FIRING, LABELS, MOVED, RESOLVED, T1, T2, status
from tests.support.http_endpoint import Endpoint

OTHER = FallbackEvent(state="firing", status=status("misplaced", T1, "on GPU 0", shard="a-first"))


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    yield server
    server.close()


def deliver(sink: WebhookSink | StdoutSink | AlertmanagerSink, *messages: Message) -> None:
    async def main() -> None:
        for message in messages:
            await sink.deliver(message)

    anyio.run(main, backend="asyncio")


def as_json(value: object) -> object:
    return msgspec.json.decode(msgspec.json.encode(value))


def firing(body: list[dict[str, object]]) -> list[object]:
    return [a["labels"] for a in body if "endsAt" not in a]


def test_stdout_gets_one_json_line_per_event_and_no_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    deliver(StdoutSink(), FIRING, MOVED, RESOLVED)
    lines = capsys.readouterr().out.splitlines()
    assert [msgspec.json.decode(line, type=FallbackEvent) for line in lines] == [FIRING, RESOLVED]


def test_a_webhook_gets_each_event_as_it_travels(endpoint: Endpoint) -> None:
    deliver(WebhookSink(endpoint.url), FIRING, MOVED, RESOLVED)
    assert endpoint.delivered() == [as_json(FIRING), as_json(RESOLVED)]


def test_alertmanager_follows_the_verdict_and_ends_the_alert_it_fired(endpoint: Endpoint) -> None:
    template = AlertTemplate({"team": "inference"}, generator_url="http://grafana/d/pw")
    sink = AlertmanagerSink(endpoint.url, template)
    sink.state.known.add(("gpu-07", "llama-8b-a"))  # as if it had posted before
    deliver(sink, FIRING, FIRING.status, MOVED, RESOLVED)
    fired, moved, resolved = endpoint.delivered()  # the status after its event posts nothing
    assert firing(fired) == [LABELS | {"team": "inference"}]
    assert [(a["labels"]["verdict"], "endsAt" in a) for a in moved] == [
        ("cpu_fallback", True),
        ("misplaced", False),
    ]
    assert moved[1]["labels"]["severity"] == "warning"
    assert moved[1]["annotations"]["description"] == MOVED.reason
    assert [(a["labels"]["verdict"], "endsAt" in a) for a in resolved] == [("misplaced", True)]
    assert all(a["generatorURL"] == "http://grafana/d/pw" for a in fired + moved + resolved)


def test_a_failed_post_raises_and_changes_nothing() -> None:
    failing = Endpoint(status=500)
    try:
        sink = AlertmanagerSink(failing.url)
        with pytest.raises(DeliveryError, match=r"^HTTP 500 Internal Server Error$"):
            deliver(sink, FIRING)
    finally:
        failing.close()
    assert sink.state.firing == {}


def test_resend_posts_what_fires_now_in_shard_order_and_nothing_once_resolved(
    endpoint: Endpoint,
) -> None:
    sink = AlertmanagerSink(endpoint.url)
    deliver(sink, FIRING, OTHER, MOVED)
    anyio.run(sink.resend, backend="asyncio")
    again = endpoint.delivered()[-1]
    assert [(a["labels"]["shard"], a["labels"]["verdict"]) for a in again] == [
        ("a-first", "misplaced"),
        ("llama-8b-a", "misplaced"),  # what is true now, not what fired
    ]
    assert again[1]["annotations"]["description"] == MOVED.reason
    assert all("endsAt" not in a for a in again)
    back = FallbackEvent(state="resolved", status=status("gpu", T2, "on GPU 1", shard="a-first"))
    deliver(sink, RESOLVED, back)
    posted = len(endpoint.delivered())
    anyio.run(sink.resend, backend="asyncio")
    assert len(endpoint.delivered()) == posted


def test_sync_after_a_restart_ends_what_resolved_meanwhile_and_fires_only_the_rest(
    endpoint: Endpoint,
) -> None:
    sink = AlertmanagerSink(endpoint.url)
    sink.learn(FIRING)  # acknowledged before the restart
    sink.learn(OTHER)
    # the bucket, stored after those: llama-8b-a resolved meanwhile
    sink.seed([(RESOLVED.status, None), (OTHER.status, None)])
    anyio.run(sink.sync, backend="asyncio")
    (body,) = endpoint.delivered()
    assert [(a["labels"]["shard"], a["labels"]["verdict"], "endsAt" in a) for a in body] == [
        ("a-first", "misplaced", False),
        ("llama-8b-a", "cpu_fallback", True),
    ]


def test_a_thousand_firing_shards_go_in_parts(endpoint: Endpoint) -> None:
    sink = AlertmanagerSink(endpoint.url)
    sink.seed(
        (status("cpu_fallback", T1, "on the CPU", shard=f"s{i:04}"), None) for i in range(1000)
    )
    anyio.run(sink.sync, backend="asyncio")
    sizes = [len(body) for body in endpoint.delivered()]
    assert sizes == [MAX_ALERTS_PER_POST] * 6  # each firing, with the other two verdicts ended
    assert sum(len(firing(body)) for body in endpoint.delivered()) == 1000


def test_resend_every_waits_for_the_consumer_and_says_a_failing_webhook_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="placewatch.consumer.alerts.sinks")
    failing = Endpoint(status=500)
    sink = AlertmanagerSink(failing.url)
    sink.learn(FIRING)  # as if delivered before the webhook went down

    async def main() -> None:
        ready = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(resend_every, sink, 0.1, ready)
            await anyio.sleep(0.5)
            assert failing.requests == []  # not before the consumer is bound
            ready.set()
            await eventually_async(lambda: len(failing.requests) >= 3)
            tg.cancel_scope.cancel()

    try:
        anyio.run(main, backend="asyncio")
    finally:
        failing.close()
    assert [r.getMessage() for r in caplog.records] == [
        "firing alerts not posted again (HTTP 500 Internal Server Error); next try in 0.1 s"
    ]


HOSTILE = "gpu\x1b]0;pwned\x07\u202e-07\nsecond line"
"""A name that retitles a terminal, rings, reverses what follows and breaks the line."""
SHOWN = r"gpu\x1b]0;pwned\x07\u202e-07\nsecond line"
RAW = ("\x1b", "\x07", "\u202e", "\n")


def hostile_event() -> FallbackEvent:
    said = msgspec.structs.replace(
        status("cpu_fallback", T1, f"computing on the CPU: {HOSTILE}", shard=f"s-{HOSTILE}"),
        node=HOSTILE,
        evidence=[f"log: {HOSTILE}"],
    )
    return FallbackEvent(state="firing", status=said)


def strings(value: object) -> list[str]:
    """Every string in a JSON document, keys too."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def no_raw_control(value: object) -> bool:
    return not any(c in s for s in strings(value) for c in RAW)


def test_stdout_and_a_webhook_get_a_hostile_name_as_its_escapes(
    endpoint: Endpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    event = hostile_event()
    deliver(StdoutSink(), event)
    (line,) = capsys.readouterr().out.splitlines()
    deliver(WebhookSink(endpoint.url), event)
    (request,) = endpoint.requests
    for sent in (line, request.body.decode()):
        status_sent = msgspec.json.decode(sent)["status"]
        assert no_raw_control(status_sent), status_sent
        assert status_sent["node"] == SHOWN
        assert status_sent["shard"] == f"s-{SHOWN}"
        assert status_sent["reason"] == f"computing on the CPU: {SHOWN}"
        assert status_sent["evidence"] == [f"log: {SHOWN}"]


def test_alertmanager_gets_a_hostile_name_as_its_escapes(endpoint: Endpoint) -> None:
    deliver(AlertmanagerSink(endpoint.url), hostile_event())
    (body,) = endpoint.delivered()
    assert no_raw_control(body), body
    (alert,) = [a for a in body if "endsAt" not in a]
    assert alert["labels"]["node"] == SHOWN
    assert alert["labels"]["shard"] == f"s-{SHOWN}"
    assert alert["annotations"]["summary"] == f"shard s-{SHOWN} on {SHOWN}: cpu_fallback"
    assert alert["annotations"]["description"] == f"computing on the CPU: {SHOWN}"
