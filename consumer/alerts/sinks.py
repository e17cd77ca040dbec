"""Where `placewatch alerts` delivers each fallback event: stdout, or a webhook.

A sink raises DeliveryError when an event did not arrive; the consumer then
retries it and does not acknowledge it. Alertmanager forgets a firing alert
that is not posted again within its resolve_timeout (5 minutes by default),
so that sink also posts the firing alerts again every so often, as
Prometheus does.
"""

from __future__ import annotations

import logging
import sys
from typing import Protocol

import anyio
import msgspec

from placewatch.schemas import ComputeStatus, FallbackEvent

from .alertmanager import alertmanager_alerts
from .webhook import DeliveryError, post_json

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 10.0
RESEND_S = 60.0

ShardKey = tuple[str, str]


class Sink(Protocol):
    async def deliver(self, event: FallbackEvent) -> None:
        """Deliver one event or raise DeliveryError."""


class StdoutSink:
    """One JSON line per event, as the event travels (the contract's JSON)."""

    async def deliver(self, event: FallbackEvent) -> None:
        try:
            sys.stdout.write(msgspec.json.encode(event).decode() + "\n")
            sys.stdout.flush()
        except OSError as exc:
            raise DeliveryError(f"stdout: {exc.strerror or exc}") from None


class WebhookSink:
    """POST each event to a URL: the event's JSON, or Alertmanager's v2 alerts."""

    def __init__(
        self,
        url: str,
        alertmanager: bool = False,
        generator_url: str | None = None,
        timeout: float = HTTP_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.alertmanager = alertmanager
        self.generator_url = generator_url
        self.timeout = timeout
        self.fired: dict[ShardKey, ComputeStatus] = {}
        """The status each firing shard fired with: a resolved alert repeats its labels."""
        self._lock = anyio.Lock()  # a resend never lands after the event that resolved it

    def learn(self, event: FallbackEvent) -> None:
        key = (event.status.node, event.status.shard)
        if event.state == "firing":
            self.fired[key] = event.status
        else:
            self.fired.pop(key, None)

    async def deliver(self, event: FallbackEvent) -> None:
        async with self._lock:
            if self.alertmanager:
                fired = self.fired.get((event.status.node, event.status.shard))
                body = msgspec.json.encode(alertmanager_alerts(event, fired, self.generator_url))
            else:
                body = msgspec.json.encode(event)
            await self._post(body)
            self.learn(event)

    async def resend(self) -> None:
        """Post every firing alert again (Alertmanager format)."""
        async with self._lock:
            if not self.fired:
                return
            alerts = [
                alertmanager_alerts(FallbackEvent(state="firing", status=s), s, self.generator_url)[
                    0
                ]
                for _, s in sorted(self.fired.items())
            ]
            await self._post(msgspec.json.encode(alerts))

    async def _post(self, body: bytes) -> None:
        await anyio.to_thread.run_sync(
            post_json, self.url, body, self.timeout, abandon_on_cancel=True
        )


async def resend_every(sink: WebhookSink, every: float, ready: anyio.Event) -> None:
    """Post the firing alerts again every `every` seconds, once the consumer is bound."""
    await ready.wait()
    failing = False
    while True:
        await anyio.sleep(every)
        try:
            await sink.resend()
        except DeliveryError as exc:
            if not failing:
                log.warning("firing alerts not posted again (%s); next try in %g s", exc, every)
            failing = True
        else:
            failing = False
