"""The durable JetStream consumer behind `placewatch alerts`: each message delivered to a
sink, and acknowledged once it was.

A durable pull consumer in the prefix's events stream (PLACEWATCH_EVENTS) on
<prefix>.fallback.>, and on
<prefix>.compute.> too for a sink that follows statuses (Alertmanager's: a verdict that
changes inside a firing fallback is only a status). One stream keeps both in the order
the worker published them. A message is acknowledged only after the sink took it (for a
webhook, a 2xx); while the sink fails it is retried with backoff and not acknowledged.
The server keeps the consumer's position, so a restarted one resumes after the last
message it acknowledged and delivers none of those again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable

import anyio
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from placewatch.backoff import Backoff
from placewatch.retained import Incomplete, stored_at
from placewatch.schemas import FallbackEvent, subjects
from placewatch.schemas.printable import printable
from placewatch.schemas.streams import for_prefix

from .catchup import catch_up, decode_message, release
from .options import DEFAULT_DURABLE
from .reconcile import Message, status_of
from .sinks import AlertmanagerSink, Sink
from .skipped import Skipped
from .webhook import DeliveryError

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_DURABLE", "Conflict", "consume", "filters"]

ACK_WAIT_S = 60.0
"""Longer than one try and the longest backoff: a retried message stays this consumer's."""
FETCH_WAIT_S = 5.0
"""How long one pull request waits for a message before the next is sent."""
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STREAM_POLL_S = 2.0
SETUP_ERRORS = (nats.errors.Error, TimeoutError, Incomplete)


class Conflict(Exception):
    """The durable consumer exists with another filter; the message says what to do."""


def filters(prefix: str, statuses: bool) -> list[str]:
    """What the durable consumer follows: fallback events, and statuses when asked."""
    if statuses:
        return [subjects.all_compute(prefix), subjects.all_fallback(prefix)]
    return [subjects.all_fallback(prefix)]


async def consume(
    nc: Client,
    prefix: str,
    durable: str,
    sink: Sink,
    ready: anyio.Event | None = None,
    *,
    fetch_wait_s: float = FETCH_WAIT_S,
) -> None:
    """Deliver every message, in stream order, for ever; `ready` is set once the consumer
    is bound (and, for Alertmanager, what is firing now was posted). `fetch_wait_s`: how
    long a pull request waits (FETCH_WAIT_S; a test has many expire in a second)."""
    js = nc.jetstream()
    stream = for_prefix(prefix).events.name
    skipped = Skipped()  # across reconnections: a message skipped again is counted again
    said = ""
    while True:
        await _wait_for_stream(js, stream)
        sub = None
        try:
            try:
                sub, floor = await _bind(js, prefix, durable, sink.follows_statuses)
                if isinstance(sink, AlertmanagerSink):
                    await catch_up(nc, prefix, filters(prefix, True), floor, sink, skipped=skipped)
            except SETUP_ERRORS as exc:
                why = (
                    f"cannot set up consumer {durable} ({exc}); retrying every {STREAM_POLL_S:g} s"
                )
                if why != said:
                    log.warning("%s", why)
                    said = why
                await anyio.sleep(STREAM_POLL_S)
                continue
            said = ""
            await _deliver_from(
                sub, prefix, durable, sink, ready, skipped=skipped, fetch_wait_s=fetch_wait_s
            )
        except SETUP_ERRORS as exc:
            log.warning("consumer %s failed (%s); setting it up again", durable, exc)
            await anyio.sleep(STREAM_POLL_S)
        finally:
            if sub is not None:
                await release(sub)  # else the drain at exit waits on it (catchup.release)


async def _deliver_from(
    sub: JetStreamContext.PullSubscription,
    prefix: str,
    durable: str,
    sink: Sink,
    ready: anyio.Event | None,
    *,
    skipped: Skipped,
    fetch_wait_s: float,
) -> None:
    if isinstance(sink, AlertmanagerSink):
        await _until_delivered("what is firing now", sink.sync)
    if ready is not None:
        ready.set()
    log.info(
        "delivering fallback events from %s (consumer %s)", for_prefix(prefix).events.name, durable
    )
    await _deliver_all(sub, prefix, sink, skipped, fetch_wait_s)


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
    js: JetStreamContext, prefix: str, durable: str, statuses: bool
) -> tuple[JetStreamContext.PullSubscription, int]:
    """The durable consumer, created when missing, its filter changed when it is one this
    command made for another format; and the last stream sequence it acknowledged."""
    wanted = filters(prefix, statuses)
    stream = for_prefix(prefix).events.name
    config = ConsumerConfig(
        durable_name=durable,
        name=durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ACK_WAIT_S,
        filter_subjects=wanted,
        max_ack_pending=1,
    )
    try:
        info = await js.consumer_info(stream, durable)
    except nats.js.errors.NotFoundError:
        info = await js.add_consumer(stream, config)
        log.info("created durable consumer %s on %s", durable, ", ".join(wanted))
    found = info.config.filter_subjects or [info.config.filter_subject or ">"]
    if sorted(found) != wanted:
        if sorted(found) != filters(prefix, not statuses):
            raise Conflict(
                f"consumer {durable} exists on {stream} with filter "
                f"{', '.join(found)!r}, not {', '.join(wanted)!r}; pick another --durable "
                f"or remove it (nats consumer rm {stream} {durable})"
            )
        # Made by this command for the other format: the position stays where it was.
        info = await js.add_consumer(stream, config)
        log.info("consumer %s now follows %s", durable, ", ".join(wanted))
    sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
    floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
    return sub, floor


async def _deliver_all(
    sub: JetStreamContext.PullSubscription,
    prefix: str,
    sink: Sink,
    skipped: Skipped,
    fetch_wait_s: float,
) -> None:
    while True:
        try:
            (msg,) = await sub.fetch(1, timeout=fetch_wait_s)
        except (nats.errors.TimeoutError, TimeoutError):
            continue
        message = decode_message(msg, prefix, skipped)
        if message is None:
            await msg.term()  # never deliverable: do not block the ones behind it
            continue
        try:
            await _until_delivered(
                _name(message), functools.partial(sink.deliver, message, stored_at(msg)), msg
            )
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(1, shield=True):
                await msg.nak()  # undelivered: the next run takes it at once
            raise
        await _ack(msg)


async def _until_delivered(
    what: str, attempt: Callable[[], Awaitable[None]], msg: Msg | None = None
) -> None:
    """Try until the sink took it, with backoff; `msg` is kept ours meanwhile."""
    backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S)
    failed = False
    while True:
        try:
            # A try under way finishes even when stopping (the webhook timeout at most): an
            # endpoint that took it must not be sent it again by the next run.
            with anyio.CancelScope(shield=True):
                await attempt()
        except DeliveryError as exc:
            log.warning("%s not delivered (%s); again in %g s", what, exc, backoff.delay)
            failed = True
        else:
            if failed:
                log.info("%s delivered", what)
            return
        if msg is not None:
            with contextlib.suppress(nats.errors.Error):
                await msg.in_progress()  # still ours: no redelivery while we retry
        await backoff.wait()


async def _ack(msg: Msg) -> None:
    """Acknowledge, and wait until the server has it: a restart must not deliver it again."""
    backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S)
    with anyio.move_on_after(ACK_WAIT_S):
        while True:
            try:
                await msg.ack_sync(timeout=2)
                return
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("acknowledgement not confirmed (%s); again in %g s", exc, backoff.delay)
            await backoff.wait()
    log.error("acknowledgement never confirmed: this message may be delivered again")


def _name(message: Message) -> str:
    s = status_of(message)
    if isinstance(message, FallbackEvent):
        said = f"fallback {message.state} for shard {s.shard} on {s.node} ({s.verdict})"
    else:
        said = f"status of shard {s.shard} on {s.node} ({s.verdict})"
    return printable(said)
