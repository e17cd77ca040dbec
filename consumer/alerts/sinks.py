"""Where `placewatch alerts` delivers: stdout, a webhook, or Alertmanager.

A sink raises DeliveryError when a message did not arrive; the consumer then retries it
and does not acknowledge it. Stdout and a JSON webhook get each FallbackEvent as it
travels, each control character and bidirectional mark in its text shown as its escape
(schemas/printable.py), as Alertmanager's labels and annotations are: a receiver that shows
the text (a chat, a terminal) must not take a node's name as a command.

Alertmanager gets the alerts that say what each shard does now (reconcile.py): it follows
compute statuses too, reads what the bus keeps at start, and posts the firing alerts again
every so often, as Prometheus does, since it forgets a firing alert that is not posted again
within its resolve_timeout (5 minutes by default).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Protocol

import anyio
import msgspec

from placewatch.schemas import FallbackEvent
from placewatch.schemas.printable import printable_values

from .alertmanager import AlertTemplate
from .blindness import Blind, Blindness
from .options import HTTP_TIMEOUT_S
from .reconcile import Alert, AlertState, Message, Plan, Stamped
from .webhook import DeliveryError, post_json

log = logging.getLogger(__name__)

MAX_ALERTS_PER_POST = 500
"""A fleet-wide restart can fire thousands at once; Alertmanager takes them in parts."""


class Sink(Protocol):
    follows_statuses: bool
    """Whether it takes ComputeStatus messages too, not only FallbackEvents."""

    async def deliver(self, message: Message, stored: float | None = None) -> None:
        """Deliver one message (stored by the server at `stored`) or raise DeliveryError."""


class StdoutSink:
    """One JSON line per fallback event, as the event travels (the contract's JSON)."""

    follows_statuses = False

    async def deliver(self, message: Message, stored: float | None = None) -> None:
        if not isinstance(message, FallbackEvent):
            return
        try:
            sys.stdout.write(event_json(message).decode() + "\n")
            sys.stdout.flush()
        except OSError as exc:
            raise DeliveryError(f"stdout: {exc.strerror or exc}") from None


class WebhookSink:
    """POST each fallback event to a URL, as it travels."""

    follows_statuses = False

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT_S) -> None:
        self.url = url
        self.timeout = timeout

    async def deliver(self, message: Message, stored: float | None = None) -> None:
        if isinstance(message, FallbackEvent):
            await _post(self.url, event_json(message), self.timeout)


class AlertmanagerSink:
    """POST Alertmanager's v2 alerts: each shard's alert as its latest status says."""

    follows_statuses = True

    def __init__(
        self,
        url: str,
        template: AlertTemplate | None = None,
        timeout: float = HTTP_TIMEOUT_S,
        blindness: Blindness | None = None,
    ) -> None:
        self.url = url
        self.template = template or AlertTemplate()
        self.timeout = timeout
        self.state = AlertState()
        self.blindness = blindness
        """The nodes' GPU tools and the blindness alerts; None: no blindness alert."""
        self._lock = anyio.Lock()  # a resend never lands after the message that changed it

    def learn(self, message: Message, stored: float | None = None) -> None:
        """A message delivered before this process started."""
        self.state.learn(message, stored)

    def seed(self, statuses: Iterable[Stamped]) -> None:
        """The latest statuses the bus keeps, each with when it was stored: what is true
        now."""
        self.state.seed(statuses)

    async def sync(self) -> None:
        """Post what is firing now and end what is not: at start, once seeded."""
        async with self._lock:
            plans = self.state.plan_all()
            await self._post([a for p in plans for a in p.alerts])
            self._commit(plans)

    async def deliver(self, message: Message, stored: float | None = None) -> None:
        async with self._lock:
            plan = self.state.plan(message, stored)
            await self._post(plan.alerts)
            self._commit([plan])

    async def resend(self) -> None:
        """Post every firing alert again."""
        async with self._lock:
            await self._post(self.state.firing_alerts())
            if self.blindness is not None:
                await self._post_blind(self.blindness.firing_alerts())

    async def check_blindness(self, now: float) -> None:
        """Fire what has been blind past the limit at `now`, and end what no longer is."""
        if self.blindness is None:
            return
        async with self._lock:
            posts = self.blindness.plan(self.state.latest, self.state.stored, now)
            await self._post_blind(posts)
            self.blindness.commit(posts)

    async def _post_blind(self, alerts: list[Blind]) -> None:
        now = datetime.now(UTC)
        for start in range(0, len(alerts), MAX_ALERTS_PER_POST):
            part = [
                self.template.blind_body(b, now)
                for b in alerts[start : start + MAX_ALERTS_PER_POST]
            ]
            await _post(self.url, msgspec.json.encode(part), self.timeout)

    def _commit(self, plans: list[Plan]) -> None:
        for plan in plans:
            self.state.commit(plan)

    async def _post(self, alerts: list[Alert]) -> None:
        for start in range(0, len(alerts), MAX_ALERTS_PER_POST):
            part = self.template.bodies(alerts[start : start + MAX_ALERTS_PER_POST])
            await _post(self.url, msgspec.json.encode(part), self.timeout)


def event_json(event: FallbackEvent) -> bytes:
    """The event in the contract's JSON, every string in it printable."""
    return msgspec.json.encode(printable_values(msgspec.to_builtins(event)))


async def _post(url: str, body: bytes, limit_s: float) -> None:
    await anyio.to_thread.run_sync(post_json, url, body, limit_s, abandon_on_cancel=True)


async def check_blindness_every(sink: AlertmanagerSink, every: float, ready: anyio.Event) -> None:
    """Fire and end blindness alerts as time passes, every `every` seconds, once the consumer
    is bound (and the latest statuses are known)."""
    await ready.wait()
    failing = False
    while True:
        try:
            await sink.check_blindness(time.time())
        except DeliveryError as exc:
            if not failing:
                log.warning("blindness alerts not posted (%s); next try in %g s", exc, every)
            failing = True
        else:
            failing = False
        await anyio.sleep(every)


async def resend_every(sink: AlertmanagerSink, every: float, ready: anyio.Event) -> None:
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
