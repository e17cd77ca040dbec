"""What the Alertmanager sink reads before it delivers anything: the messages this durable
consumer acknowledged before (which alerts Alertmanager was told), then the compute bucket
(what is true now).

Alertmanager holds what the last run posted; the next run must end what is no longer
true and post again only what is. The acknowledged messages say what was posted: a
resolved event that was in flight when the last run was killed is not acknowledged, and
comes again only after the ack wait (60 s), but the bucket already says the shard
resolved, so its alert ends at start instead of firing on until then.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable

import anyio
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from placewatch.retained import compute_statuses, stored_at
from placewatch.schemas import (
    ComputeStatus,
    DecodeError,
    FallbackEvent,
    decode,
    on_own_subject,
    subjects,
)
from placewatch.schemas.codec import why_refused
from placewatch.schemas.streams import for_prefix

from .reconcile import Message
from .sinks import AlertmanagerSink
from .skipped import Skipped

log = logging.getLogger(__name__)

FETCH_WAIT_S = 5.0
BUCKET_READ_S = 60.0
"""How long reading every key of the compute bucket may take (a large fleet's)."""
_BATCH = 256
UNSUBSCRIBE_S = 1.0


async def catch_up(
    nc: Client,
    prefix: str,
    filters: list[str],
    floor: int,
    sink: AlertmanagerSink,
    *,
    skipped: Skipped,
) -> None:
    """Teach `sink` what was posted (the messages up to `floor`) and what is true now."""
    await replay(nc.jetstream(), prefix, filters, floor, sink.learn, skipped=skipped)
    statuses = await compute_statuses(nc, prefix, BUCKET_READ_S, release)
    sink.seed(statuses)
    log.info("read %d shard statuses from the compute bucket", len(statuses))


async def replay(
    js: JetStreamContext,
    prefix: str,
    filters: list[str],
    floor: int,
    learn: Callable[[Message, float], None],
    *,
    skipped: Skipped,
) -> None:
    """Read again, without delivering, the messages already acknowledged (up to `floor`)."""
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
            filter_subjects=filters,
            inactive_threshold=10.0,
            mem_storage=True,
        ),
    )
    sub = await js.pull_subscribe_bind(stream=stream, name=name)
    try:
        while True:
            try:
                batch = await sub.fetch(_BATCH, timeout=FETCH_WAIT_S)
            except (nats.errors.TimeoutError, TimeoutError):
                return
            for msg in batch:
                if msg.metadata.sequence.stream > floor:
                    return
                message = decode_message(msg, prefix, skipped)
                if message is not None:
                    learn(message, stored_at(msg))
            if batch[-1].metadata.num_pending == 0:
                return
    finally:
        await release(sub)  # the server removes it when idle: no delete right needed


async def release(sub: Subscription | JetStreamContext.PullSubscription) -> None:
    """Unsubscribe a (pull) subscription, even while cancelled.

    One left subscribed when the connection drains makes the drain wait for its queue,
    where a fetch that timed out or was cancelled left a message nobody takes (nats-py
    2.16): the drain hangs until cancelled mid-flush, and nats-py then logs tracebacks
    (`_GatheringFuture exception was never retrieved`, `InvalidStateError` in
    `_process_pong`) as SIGTERM stops `placewatch alerts`."""
    with anyio.move_on_after(UNSUBSCRIBE_S, shield=True), contextlib.suppress(nats.errors.Error):
        await sub.unsubscribe()


def decode_message(msg: Msg, prefix: str, skipped: Skipped) -> Message | None:
    """A ComputeStatus or FallbackEvent, as its subject says; None (counted in `skipped`)
    when it is not, or names another node or shard than its subject's (consumer/impostors.py)."""
    kind: type[ComputeStatus] | type[FallbackEvent] = FallbackEvent
    if subjects.covers(subjects.all_compute(prefix), msg.subject):
        kind = ComputeStatus
    seq = msg.metadata.sequence.stream
    try:
        message = decode(msg.data, kind, msg.headers)
    except DecodeError as exc:
        skipped.skip(seq, msg.subject, str(exc))
        return None
    if not on_own_subject(message, msg.subject):
        skipped.skip(seq, msg.subject, why_refused(message, msg.subject))
        return None
    return message
