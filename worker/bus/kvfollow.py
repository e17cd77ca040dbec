"""The latest value of each key of a KV bucket, then every change: one push consumer.

Not nats-py's KV watcher, for two reasons. Its ordered consumer checks flow
control four times a second whatever happens: wake-ups an idle worker has no
other reason for; this consumer wakes for a change and for the server's idle
heartbeat. And it decides that the initial values are all in
from how many messages the client has handled when the consumer's info comes
back, so a busy client that the server has already sent them all to is told
there were none; this one counts what the server says it delivered.

The consumer has a name, so that nats-py asks for it on
`$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>` (nats-server 2.9+), and the
server refuses a create whose filter differs from the one in that subject: a
node's credentials then allow only its own keys' filter (docs/operations.md,
Least privilege). It is not deleted: the server removes it once nobody has
listened for SILENT_HEARTBEATS heartbeats, so a node needs no right to delete
consumers, which would let it delete anyone's.
"""

from __future__ import annotations

import contextlib
import math
import secrets
from collections.abc import Callable

import anyio
import nats.errors
from anyio.streams.memory import MemoryObjectReceiveStream
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, Header
from nats.js.kv import KV_MARKER_REASON

from placewatch.schemas import subjects

EXPIRED = ("MaxAge", "Purge", "Remove")  # server-placed markers (nats-server 2.11+)
SILENT_HEARTBEATS = 2.5
"""Heartbeats without a word from the server before a follow gives up; the server removes
the consumer after as long without a listener."""
CONSUMER_PREFIX = "placewatch-kv-"
"""Its consumers' names: this, then random hex, which another client cannot guess."""

Values = dict[str, bytes | None]
"""Key to value; None for a key deleted or purged."""


async def follow(
    nc: Client,
    bucket: str,
    keys: str,
    *,
    heartbeat: float,
    latest: Callable[[Values], None],
    change: Callable[[str, bytes | None], None] | None = None,
) -> str:
    """Hand `latest` the latest value of each key matching `keys`, once all are in; then
    each change to `change`, until one may have been missed (a consumer sequence that skips,
    a heartbeat that says more was sent, no word for SILENT_HEARTBEATS heartbeats): why.
    Without `change`, returns "" once `latest` has them. Raises nats.errors.Error when the
    consumer cannot be made (no bucket, no JetStream, no permission)."""
    js = nc.jetstream()
    stream = subjects.kv_stream(bucket)
    prefix = subjects.kv_prefix(bucket)
    send, receive = anyio.create_memory_object_stream[Msg](math.inf)
    with send, receive:
        sub = await nc.subscribe(nc.new_inbox(), cb=send.send)
        try:
            info = await js.add_consumer(
                stream,
                ConsumerConfig(
                    name=f"{CONSUMER_PREFIX}{secrets.token_hex(8)}",
                    deliver_subject=sub.subject,
                    filter_subject=f"{prefix}{keys}",
                    deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                    ack_policy=AckPolicy.NONE,
                    idle_heartbeat=heartbeat,
                    inactive_threshold=SILENT_HEARTBEATS * heartbeat,
                    mem_storage=True,
                    num_replicas=1,
                ),
            )
            initial: Values | None = {}
            if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
                latest({})  # nothing to wait for
                initial = None
                if change is None:
                    return ""
            return await _read_changes(
                receive, prefix, heartbeat, initial=initial, latest=latest, change=change
            )
        finally:
            # The server removes the consumer once idle; an error here: gone with the server.
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(1),
                contextlib.suppress(nats.errors.Error, TimeoutError),
            ):
                await sub.unsubscribe()


async def _read_changes(
    receive: MemoryObjectReceiveStream[Msg],
    prefix: str,
    heartbeat: float,
    *,
    initial: Values | None,
    latest: Callable[[Values], None],
    change: Callable[[str, bytes | None], None] | None,
) -> str:
    delivered = 0
    while True:
        msg = None
        with anyio.move_on_after(SILENT_HEARTBEATS * heartbeat):
            msg = await receive.receive()
        if msg is None:
            return f"no word from the server in {SILENT_HEARTBEATS * heartbeat:g} s"
        headers = msg.headers or {}
        status = headers.get(Header.STATUS)
        if status is not None:
            last = headers.get(Header.LAST_CONSUMER)
            if status != "100":
                return f"the server says {status} {headers.get(Header.DESCRIPTION, '')}"
            if last is not None and int(last) != delivered:
                return f"the server sent {last} changes, {delivered} arrived"
            continue  # an idle heartbeat
        meta = msg.metadata
        delivered += 1
        if meta.sequence.consumer != delivered:
            return f"change {meta.sequence.consumer} arrived after {delivered - 1}"
        op = headers.get(subjects.KV_OPERATION)
        reason = headers.get(KV_MARKER_REASON)
        deleted = op in subjects.KV_DELETED or reason in EXPIRED
        key = msg.subject.removeprefix(prefix)
        value = None if deleted else msg.data
        if op is None and reason is not None and not deleted:
            pass  # a marker of a kind this worker does not know: the value stands
        elif initial is not None:
            initial[key] = value
        elif change is not None:
            change(key, value)
        if initial is not None and meta.num_pending == 0:
            latest(initial)
            initial = None
            if change is None:
                return ""
