"""The durable JetStream consumer behind `placewatch alerts`: each fallback event delivered
to a sink, and acknowledged once it was.

A durable pull consumer on <prefix>.fallback.> in the prefix's events stream
(PLACEWATCH_EVENTS). An event
is acknowledged only after the sink took it (for a webhook, a 2xx); while the
sink fails the event is retried with backoff and not acknowledged. The server
keeps the consumer's position, so a restarted one resumes after the last event
it acknowledged and delivers none of those again.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable

import anyio
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from placewatch.schemas import DecodeError, FallbackEvent, decode, subjects
from placewatch.schemas.streams import for_prefix

from .sinks import Sink, WebhookSink
from .webhook import DeliveryError

log = logging.getLogger(__name__)

DEFAULT_DURABLE = "placewatch-alerts"
ACK_WAIT_S = 60.0
"""Longer than one try and the longest backoff: a retried event stays this consumer's."""
FETCH_WAIT_S = 5.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STREAM_POLL_S = 2.0


class Conflict(Exception):
    """The durable consumer exists with another filter; the message says what to do."""


async def consume(
    nc: Client, prefix: str, durable: str, sink: Sink, ready: anyio.Event | None = None
) -> None:
    """Deliver every fallback event, in stream order, for ever; `ready` is set once the
    consumer is bound (and, for Alertmanager, the firing alerts are known)."""
    js = nc.jetstream()
    stream = for_prefix(prefix).events.name
    said = ""
    while True:
        await _wait_for_stream(js, stream)
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
        log.info("delivering fallback events from %s (consumer %s)", stream, durable)
        try:
            await _deliver_all(sub, sink)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("consumer %s failed (%s); setting it up again", durable, exc)
            await anyio.sleep(STREAM_POLL_S)


async def _wait_for_stream(js: JetStreamContext, stream: str) -> None:
    said = ""
    while True:
        try:
            await js.stream_info(stream)
            return
        except nats.js.errors.NotFoundError:
            why = f"stream {stream} does not exist yet; waiting for a worker to create it"
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
            why = "the server has no JetStream; waiting for it (nats-server -js)"
        except (nats.errors.Error, TimeoutError) as exc:
            why = f"cannot read stream {stream} ({exc}); retrying"
        if why != said:
            log.warning("%s", why)
            said = why
        await anyio.sleep(STREAM_POLL_S)


async def _bind(
    js: JetStreamContext, prefix: str, durable: str
) -> tuple[JetStreamContext.PullSubscription, int]:
    """The durable consumer, created when missing; and the last stream sequence it acked."""
    wanted = subjects.all_fallback(prefix)
    stream = for_prefix(prefix).events.name
    try:
        info = await js.consumer_info(stream, durable)
    except nats.js.errors.NotFoundError:
        info = await js.add_consumer(
            stream,
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
            f"consumer {durable} exists on {stream} with filter {found!r}, "
            f"not {wanted!r}; pick another --durable or remove it "
            f"(nats consumer rm {stream} {durable})"
        )
    sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
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
    stream = for_prefix(prefix).events.name
    await js.add_consumer(
        stream,
        ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            filter_subject=subjects.all_fallback(prefix),
            inactive_threshold=10.0,
            mem_storage=True,
        ),
    )
    sub = await js.pull_subscribe_bind(stream=stream, name=name)
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
            log.warning("%s not delivered (%s); again in %g s", _event_name(event), exc, delay)
            failed = True
        else:
            if failed:
                log.info("%s delivered", _event_name(event))
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


def _decode(msg: Msg) -> FallbackEvent | None:
    try:
        return decode(msg.data, FallbackEvent, msg.headers)
    except DecodeError as exc:
        seq = msg.metadata.sequence.stream
        log.error("skipped message %d on %s: %s", seq, msg.subject, exc)
        return None


def _event_name(event: FallbackEvent) -> str:
    s = event.status
    return f"fallback {event.state} for shard {s.shard} on {s.node} ({s.verdict})"
