"""What the bus keeps, read once: the last message of each subject of a stream, and every
shard's latest status in the compute bucket.

A reader that starts late (a gateway's FleetView, `placewatch alerts` after a restart)
must know the fleet at once, not after every node has published again. Each read is an
ephemeral pull consumer with deliver policy last-per-subject, never deleted by the reader
(the server removes it once idle, so a reader needs no delete right).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from placewatch.schemas import (
    ComputeStatus,
    DecodeError,
    decode,
    on_own_subject,
    subjects,
    value_headers,
)
from placewatch.schemas.codec import HEADER_CONTENT_TYPE, why_refused
from placewatch.schemas.printable import printable
from placewatch.schemas.streams import for_prefix

log = logging.getLogger(__name__)

IDLE_S = 10.0
"""The server removes a read's ephemeral consumer this long after its last fetch."""
JS_API = "$JS.API"
BATCH = 1024
"""Messages asked of the server at a time (a fleet's inventories: 6 MB)."""

Release = Callable[[Subscription], Awaitable[None]]
"""How a read lets go of its subscription: `unsubscribe`, or a caller's own that survives
its cancellation (anyio's, in `placewatch alerts`; this module imports none)."""


class Incomplete(Exception):
    """The read stopped before the last message; the message says how far it got."""


async def unsubscribe(sub: Subscription | JetStreamContext.PullSubscription) -> None:
    """Let go of a subscription; one the connection already dropped is let go."""
    with contextlib.suppress(nats.errors.Error):
        await sub.unsubscribe()


async def last_per_subject(
    nc: Client,
    stream: str,
    subject: str,
    within: float,
    *,
    complete: bool = False,
    release: Release = unsubscribe,
) -> list[Msg]:
    """The last message of each subject of `stream` that `subject` covers, oldest first.

    Empty when the stream does not exist (a fresh cluster) or the server has no JetStream.
    What is left unread (after `within` seconds, or a failed fetch) is left out, or, with
    `complete`, raises Incomplete; a consumer that cannot be made raises nats-py's error.
    """
    found: list[Msg] = []
    await each_last_per_subject(
        nc, stream, subject, within, found.extend, complete=complete, release=release
    )
    return found


async def each_last_per_subject(
    nc: Client,
    stream: str,
    subject: str,
    within: float,
    take: Callable[[list[Msg]], object],
    *,
    complete: bool = False,
    release: Release = unsubscribe,
) -> int:
    """last_per_subject, handing each batch to `take` as it comes rather than holding them
    all (a fleet's last telemetry is a few hundred MB); how many were taken."""
    js = nc.jetstream()
    deadline = time.monotonic() + within
    name = f"placewatch-read-{secrets.token_hex(6)}"
    config = ConsumerConfig(
        name=name,
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=AckPolicy.NONE,
        filter_subject=subject,
        inactive_threshold=IDLE_S,
        mem_storage=True,
    )
    try:
        info = await js.add_consumer(stream, config, timeout=_left(deadline))
    except nats.js.errors.NotFoundError:
        return 0  # a fresh cluster: no worker has created it yet
    except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
        return 0  # a server without JetStream keeps nothing
    pending = info.num_pending or 0
    taken = 0
    sub = await _Batches.subscribe(nc)
    try:
        while pending > 0 and time.monotonic() < deadline:
            try:
                batch = await sub.next(stream, name, min(pending, BATCH), _left(deadline))
            except nats.errors.Error:
                batch = []
            if not batch:
                break  # what was read stands; `complete` says what was not
            take(batch)
            taken += len(batch)
            # what is stored meanwhile too: a stream that keeps one message a subject drops
            # the copy the consumer was to deliver when a newer one comes
            pending = batch[-1].metadata.num_pending
    finally:
        await release(sub.sub)
    if pending > 0 and complete:
        raise Incomplete(
            f"read {taken} of the last messages of {stream} in {within:g} s, {pending} left"
        )
    return taken


async def compute_statuses(
    nc: Client, prefix: str, within: float, release: Release = unsubscribe
) -> list[tuple[ComputeStatus, float]]:
    """Every shard's latest status in the prefix's compute bucket (placewatch_compute), each
    with when the server stored it (stored_at), all of them or Incomplete; a value that is no
    ComputeStatus is logged and left out."""
    found = []
    bucket = for_prefix(prefix).compute
    subject = subjects.kv_subject(bucket.name)
    kept = await last_per_subject(
        nc, bucket.stream, subject, within, complete=True, release=release
    )
    for msg in kept:
        headers = msg.headers or {}
        if headers.get(subjects.KV_OPERATION) in subjects.KV_DELETED:
            continue
        try:
            status = decode(msg.data, ComputeStatus, kv_headers(msg.data, headers))
        except DecodeError as exc:
            log.warning("ignored %s in bucket %s: %s", printable(msg.subject), bucket.name, exc)
            continue
        if not on_own_subject(status, msg.subject):
            log.warning(
                "ignored %s in bucket %s: %s",
                printable(msg.subject),
                bucket.name,
                why_refused(status, msg.subject),
            )
            continue
        found.append((status, stored_at(msg)))
    return found


class _Batches:
    """A pull consumer's messages, asked for a batch at a time on an inbox of its own and
    taken by a callback: nats-py's `fetch` waits on each message in a task of its own, the
    most of a read's time where a batch is a thousand small messages."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.inbox = nc.new_inbox()
        self.sub: Subscription
        self._got: list[Msg] = []
        self._want = 0
        self._done = asyncio.Event()

    @classmethod
    async def subscribe(cls, nc: Client) -> _Batches:
        batches = cls(nc)
        batches.sub = await nc.subscribe(batches.inbox, cb=batches._take)
        return batches

    async def _take(self, msg: Msg) -> None:
        if JetStreamContext.is_status_msg(msg):  # no more now (404), or the ask expired
            self._done.set()
            return
        self._got.append(msg)
        if len(self._got) >= self._want:
            self._done.set()

    async def next(self, stream: str, consumer: str, n: int, within: float) -> list[Msg]:
        """Up to `n` messages the consumer has now; what came within `within` seconds."""
        self._got, self._want = [], n
        self._done.clear()
        ask = json.dumps({"batch": n, "no_wait": True}).encode()
        subject = f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        await self.nc.publish(subject, ask, reply=self.inbox)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), within)
        got, self._got = self._got, []
        return got


_ACK_TOKENS, _ACK_TIMESTAMP = 9, 7
"""A stream message's reply subject: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
<consumer seq>.<timestamp, ns>.<pending>."""


def stored_at(msg: Msg) -> float:
    """When the server stored a message read from a stream, in seconds since the epoch, on
    the server's clock (which orders a node's messages where the node's own clock cannot:
    NTP steps it). Where its reply subject does not say (no consumer's message is without
    it), long ago: it is newer than nothing held. The reply subject's timestamp is read
    alone where it is in the common form (nats-py's metadata makes a datetime and eight
    fields more: a tenth of a fleet's read)."""
    tokens = msg.reply.split(".") if msg.reply else []
    if len(tokens) == _ACK_TOKENS and tokens[0] == "$JS" and tokens[1] == "ACK":
        with contextlib.suppress(ValueError):
            return int(tokens[_ACK_TIMESTAMP]) / 1e9
    try:
        return msg.metadata.timestamp.timestamp()
    except (nats.errors.Error, IndexError, ValueError):
        return 0.0


def kv_headers(data: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
    """Headers for a bucket value: nats-py's KV put sends none, so the format is sniffed."""
    return headers if HEADER_CONTENT_TYPE in headers else value_headers(data)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)
