"""`placewatch alerts`: each fallback event delivered, and acknowledged once it was.

A durable JetStream pull consumer on <prefix>.fallback.> in PLACEWATCH_EVENTS.
Each event is written as one JSON line to stdout or POSTed to a webhook, and
acknowledged only after that succeeded (a 2xx); while the webhook fails the
event is retried with backoff and not acknowledged. The server keeps the
consumer's position, so a restarted one resumes after the last event it
acknowledged and delivers none of those again.

Alertmanager forgets a firing alert that is not posted again within its
resolve_timeout (5 minutes by default), so in that format the firing alerts
are posted again every --resend seconds, as Prometheus does.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import secrets
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from placewatch.schemas import ComputeStatus, DecodeError, FallbackEvent, decode, subjects

from .bus import connect, connect_options
from .config import Settings
from .watch import LOCAL_URL
from .webhook import DeliveryError, alertmanager_alerts, check_url, post_json

log = logging.getLogger(__name__)

DEFAULT_DURABLE = "placewatch-alerts"
ACK_WAIT_S = 60.0
"""Longer than one try and the longest backoff: a retried event stays this consumer's."""
FETCH_WAIT_S = 5.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
RESEND_S = 60.0
HTTP_TIMEOUT_S = 10.0
STREAM_POLL_S = 2.0
DRAIN_TIMEOUT_S = 2.0
EXIT_CONFIG = 2
INBOX = "_INBOX.placewatch-alerts"
"""Its replies' prefix, so its credentials may subscribe to its own only (docs/consumers.md)."""

ShardKey = tuple[str, str]


class Conflict(Exception):
    """The durable consumer exists with another filter; the message says what to do."""


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


def add_command(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    alerts = commands.add_parser(
        "alerts",
        parents=parents,
        help="deliver fallback events to stdout or a webhook",
        description="A durable JetStream consumer of fallback events: each is written to "
        "stdout as a JSON line or POSTed to --webhook, and acknowledged once it was "
        f"delivered. With no --nats, the embedded default {LOCAL_URL}.",
    )
    alerts.add_argument(
        "--durable",
        default=DEFAULT_DURABLE,
        metavar="NAME",
        help=f"the durable consumer's name; it keeps the position ({DEFAULT_DURABLE})",
    )
    alerts.add_argument("--webhook", metavar="URL", help="POST each event here (2xx: delivered)")
    alerts.add_argument(
        "--format",
        choices=["json", "alertmanager"],
        default="json",
        help="webhook body: the event's JSON, or Alertmanager's POST /api/v2/alerts (json)",
    )
    alerts.add_argument(
        "--generator-url", metavar="URL", help="Alertmanager format: each alert's generatorURL"
    )
    alerts.add_argument(
        "--resend",
        type=float,
        default=RESEND_S,
        metavar="SECONDS",
        help=f"Alertmanager format: post firing alerts again this often; 0: never ({RESEND_S:g})",
    )
    alerts.add_argument(
        "--timeout",
        type=float,
        default=HTTP_TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for one webhook request ({HTTP_TIMEOUT_S:g})",
    )
    alerts.set_defaults(handler=command)


def command(settings: Settings, args: argparse.Namespace) -> int:
    options = connect_options(settings)  # a ConfigError is the command line's to report
    sink: StdoutSink | WebhookSink
    if args.webhook:
        problem = check_url(args.webhook)
        if problem:
            print(f"placewatch: {problem}", file=sys.stderr)
            return EXIT_CONFIG
        sink = WebhookSink(
            args.webhook, args.format == "alertmanager", args.generator_url, args.timeout
        )
    elif args.format == "alertmanager":
        print("placewatch: --format alertmanager needs --webhook URL", file=sys.stderr)
        return EXIT_CONFIG
    else:
        sink = StdoutSink()
    servers = settings.nats or [LOCAL_URL]
    resend = args.resend if isinstance(sink, WebhookSink) and sink.alertmanager else 0.0
    try:
        return anyio.run(
            partial(
                _main,
                servers=servers,
                options=options,
                prefix=settings.prefix,
                durable=args.durable,
                sink=sink,
                resend=resend,
            ),
            backend="asyncio",
        )
    except KeyboardInterrupt:
        return 0


async def _main(
    *,
    servers: list[str],
    options: dict[str, Any],
    prefix: str,
    durable: str,
    sink: StdoutSink | WebhookSink,
    resend: float,
) -> int:
    nc: Client | None = None
    code = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            nc = await connect(
                servers, f"placewatch alerts {durable}", options | {"inbox_prefix": INBOX}
            )
            ready = anyio.Event()
            if resend > 0 and isinstance(sink, WebhookSink):
                tg.start_soon(_resend, sink, resend, ready)
            try:
                await consume(nc, prefix, durable, sink, ready)
            except Conflict as exc:
                print(f"placewatch: {exc}", file=sys.stderr)
                code = EXIT_CONFIG
            tg.cancel_scope.cancel()
    finally:
        with anyio.move_on_after(DRAIN_TIMEOUT_S, shield=True):
            if nc is not None and not nc.is_closed:
                await nc.drain()
    return code


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: stopping", signal.Signals(signum).name)
            scope.cancel()
            return


async def consume(
    nc: Client, prefix: str, durable: str, sink: Sink, ready: anyio.Event | None = None
) -> None:
    """Deliver every fallback event, in stream order, for ever; `ready` is set once the
    consumer is bound (and, for Alertmanager, the firing alerts are known)."""
    js = nc.jetstream()
    said = ""
    while True:
        await _wait_for_stream(js)
        try:
            sub, floor = await _bind(js, prefix, durable)
            if isinstance(sink, WebhookSink) and sink.alertmanager:
                await _replay(js, prefix, floor, sink.learn)
        except (nats.errors.Error, TimeoutError) as exc:
            why = f"cannot set up consumer {durable} ({exc}); retrying every {STREAM_POLL_S:g} s"
            if why != said:
                log.warning("%s", why)
                said = why
            await anyio.sleep(STREAM_POLL_S)
            continue
        said = ""
        if ready is not None:
            ready.set()
        log.info(
            "delivering fallback events from %s (consumer %s)", subjects.STREAM_EVENTS, durable
        )
        try:
            await _deliver_all(sub, sink)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("consumer %s failed (%s); setting it up again", durable, exc)
            await anyio.sleep(STREAM_POLL_S)


async def _wait_for_stream(js: JetStreamContext) -> None:
    said = ""
    while True:
        try:
            await js.stream_info(subjects.STREAM_EVENTS)
            return
        except nats.js.errors.NotFoundError:
            why = (
                f"stream {subjects.STREAM_EVENTS} does not exist yet; "
                "waiting for a worker to create it"
            )
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
            why = "the server has no JetStream; waiting for it (nats-server -js)"
        except (nats.errors.Error, TimeoutError) as exc:
            why = f"cannot read stream {subjects.STREAM_EVENTS} ({exc}); retrying"
        if why != said:
            log.warning("%s", why)
            said = why
        await anyio.sleep(STREAM_POLL_S)


async def _bind(
    js: JetStreamContext, prefix: str, durable: str
) -> tuple[JetStreamContext.PullSubscription, int]:
    """The durable consumer, created when missing; and the last stream sequence it acked."""
    wanted = f"{prefix}.fallback.>"
    try:
        info = await js.consumer_info(subjects.STREAM_EVENTS, durable)
    except nats.js.errors.NotFoundError:
        info = await js.add_consumer(
            subjects.STREAM_EVENTS,
            ConsumerConfig(
                durable_name=durable,
                name=durable,
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ACK_WAIT_S,
                filter_subject=wanted,
                max_ack_pending=1,
            ),
        )
        log.info("created durable consumer %s on %s", durable, wanted)
    found = info.config.filter_subject
    if found != wanted:
        raise Conflict(
            f"consumer {durable} exists on {subjects.STREAM_EVENTS} with filter {found!r}, "
            f"not {wanted!r}; pick another --durable or remove it "
            f"(nats consumer rm {subjects.STREAM_EVENTS} {durable})"
        )
    sub = await js.pull_subscribe_bind(durable=durable, stream=subjects.STREAM_EVENTS)
    floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
    return sub, floor


async def _replay(
    js: JetStreamContext, prefix: str, floor: int, learn: Callable[[FallbackEvent], None]
) -> None:
    """Read again, without delivering, the events already acknowledged (up to `floor`), to
    know which verdict each firing shard fired with."""
    if floor <= 0:
        return
    name = f"placewatch-alerts-replay-{secrets.token_hex(6)}"
    await js.add_consumer(
        subjects.STREAM_EVENTS,
        ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            filter_subject=f"{prefix}.fallback.>",
            inactive_threshold=10.0,
            mem_storage=True,
        ),
    )
    sub = await js.pull_subscribe_bind(stream=subjects.STREAM_EVENTS, name=name)
    try:
        while True:
            try:
                batch = await sub.fetch(256, timeout=FETCH_WAIT_S)
            except (nats.errors.TimeoutError, TimeoutError):
                return
            for msg in batch:
                if msg.metadata.sequence.stream > floor:
                    return
                event = _decode(msg)
                if event is not None:
                    learn(event)
            if batch[-1].metadata.num_pending == 0:
                return
    finally:
        await sub.unsubscribe()  # the server removes it when idle: no delete right needed


async def _deliver_all(sub: JetStreamContext.PullSubscription, sink: Sink) -> None:
    while True:
        try:
            (msg,) = await sub.fetch(1, timeout=FETCH_WAIT_S)
        except (nats.errors.TimeoutError, TimeoutError):
            continue
        event = _decode(msg)
        if event is None:
            await msg.term()  # never deliverable: do not block the ones behind it
            continue
        try:
            await _deliver_one(sink, event, msg)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(1, shield=True):
                await msg.nak()  # undelivered: the next run takes it at once
            raise
        await _ack(msg)


async def _deliver_one(sink: Sink, event: FallbackEvent, msg: Msg) -> None:
    delay = BACKOFF_FIRST_S
    failed = False
    while True:
        try:
            # A try under way finishes even when stopping (HTTP_TIMEOUT_S at most): an
            # endpoint that took the event must not be sent it again by the next run.
            with anyio.CancelScope(shield=True):
                await sink.deliver(event)
        except DeliveryError as exc:
            log.warning("%s not delivered (%s); again in %g s", _describe(event), exc, delay)
            failed = True
        else:
            if failed:
                log.info("%s delivered", _describe(event))
            return
        with contextlib.suppress(nats.errors.Error):
            await msg.in_progress()  # still ours: no redelivery while we retry
        await anyio.sleep(delay)
        delay = min(delay * 2, BACKOFF_MAX_S)


async def _ack(msg: Msg) -> None:
    """Acknowledge, and wait until the server has it: a restart must not deliver it again."""
    delay = BACKOFF_FIRST_S
    with anyio.move_on_after(ACK_WAIT_S):
        while True:
            try:
                await msg.ack_sync(timeout=2)
                return
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("acknowledgement not confirmed (%s); again in %g s", exc, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
    log.error("acknowledgement never confirmed: this event may be delivered again")


async def _resend(sink: WebhookSink, every: float, ready: anyio.Event) -> None:
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


def _decode(msg: Msg) -> FallbackEvent | None:
    try:
        return decode(msg.data, FallbackEvent, msg.headers)
    except DecodeError as exc:
        seq = msg.metadata.sequence.stream
        log.error("skipped message %d on %s: %s", seq, msg.subject, exc)
        return None


def _describe(event: FallbackEvent) -> str:
    s = event.status
    return f"fallback {event.state} for shard {s.shard} on {s.node} ({s.verdict})"
