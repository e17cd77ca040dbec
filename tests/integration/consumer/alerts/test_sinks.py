"""Where `placewatch alerts` delivers: stdout, or a webhook (a real local HTTP server) in the
event's JSON or Alertmanager's body, firing alerts posted again until resolved."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import msgspec
import pytest

from placewatch.consumer.alerts.alertmanager import alertmanager_alerts
from placewatch.consumer.alerts.sinks import StdoutSink, WebhookSink, resend_every
from placewatch.consumer.alerts.webhook import DeliveryError
from placewatch.schemas import FallbackEvent

from tests.conftest import until
from tests.support.fallback_events import FIRING, RESOLVED, T1, status
from tests.support.http_endpoint import Endpoint

OTHER = FallbackEvent(state="firing", status=status("misplaced", T1, "on GPU 0", shard="a-first"))


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    yield server
    server.close()


def deliver(sink: WebhookSink | StdoutSink, *events: FallbackEvent) -> None:
    async def main() -> None:
        for event in events:
            await sink.deliver(event)

    anyio.run(main, backend="asyncio")


def as_json(value: object) -> object:
    return msgspec.json.decode(msgspec.json.encode(value))


def test_stdout_gets_one_json_line_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    deliver(StdoutSink(), FIRING, RESOLVED)
    lines = capsys.readouterr().out.splitlines()
    assert [msgspec.json.decode(line, type=FallbackEvent) for line in lines] == [FIRING, RESOLVED]


def test_a_webhook_gets_each_event_as_it_travels(endpoint: Endpoint) -> None:
    sink = WebhookSink(endpoint.url)
    deliver(sink, FIRING, RESOLVED)
    assert endpoint.delivered() == [as_json(FIRING), as_json(RESOLVED)]


def test_alertmanager_gets_the_resolved_alert_with_the_labels_it_fired_with(
    endpoint: Endpoint,
) -> None:
    sink = WebhookSink(endpoint.url, alertmanager=True, generator_url="http://grafana/d/pw")
    deliver(sink, FIRING)
    assert list(sink.fired) == [("gpu-07", "llama-8b-a")]
    deliver(sink, RESOLVED)
    assert sink.fired == {}
    assert endpoint.delivered() == [
        as_json(alertmanager_alerts(FIRING, None, "http://grafana/d/pw")),
        as_json(alertmanager_alerts(RESOLVED, FIRING.status, "http://grafana/d/pw")),
    ]
    assert endpoint.delivered()[1][0]["labels"]["verdict"] == "cpu_fallback"


def test_a_failed_post_raises_and_the_firing_is_not_remembered() -> None:
    failing = Endpoint(status=500)
    try:
        sink = WebhookSink(failing.url, alertmanager=True)
        with pytest.raises(DeliveryError, match=r"^HTTP 500 Internal Server Error$"):
            deliver(sink, FIRING)
    finally:
        failing.close()
    assert sink.fired == {}


def test_resend_posts_every_firing_alert_in_shard_order_and_nothing_once_resolved(
    endpoint: Endpoint,
) -> None:
    sink = WebhookSink(endpoint.url, alertmanager=True)
    deliver(sink, FIRING, OTHER)
    anyio.run(sink.resend, backend="asyncio")
    again = endpoint.delivered()[-1]
    assert [(a["labels"]["shard"], a["labels"]["verdict"]) for a in again] == [
        ("a-first", "misplaced"),
        ("llama-8b-a", "cpu_fallback"),
    ]
    assert all("endsAt" not in a for a in again)
    deliver(sink, RESOLVED, FallbackEvent(state="resolved", status=OTHER.status))
    posted = len(endpoint.delivered())
    anyio.run(sink.resend, backend="asyncio")
    assert len(endpoint.delivered()) == posted


def test_resend_every_waits_for_the_consumer_and_says_a_failing_webhook_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="placewatch.consumer.alerts.sinks")
    failing = Endpoint(status=500)
    sink = WebhookSink(failing.url, alertmanager=True)
    sink.learn(FIRING)  # as if delivered before the webhook went down

    async def main() -> None:
        ready = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(resend_every, sink, 0.1, ready)
            await anyio.sleep(0.5)
            assert failing.requests == []  # not before the consumer is bound
            ready.set()
            await until(lambda: len(failing.requests) >= 3)
            tg.cancel_scope.cancel()

    try:
        anyio.run(main, backend="asyncio")
    finally:
        failing.close()
    assert [r.getMessage() for r in caplog.records] == [
        "firing alerts not posted again (HTTP 500 Internal Server Error); next try in 0.1 s"
    ]
