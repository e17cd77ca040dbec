"""What is true now, stored where the stores lack it.

A worker that started on a server without JetStream, or whose stream or bucket was deleted,
published its events as core messages (or could not publish them) while there was nowhere to
keep them: a consumer that starts later would read nothing of a shard that fires now. Once the
streams and the compute bucket exist again, the next tick stores each shard's current status
where the bucket's value for its key says something else (or nothing), and a firing event for
each fallback under way where the stream's last event on its subject is not a firing one, so
that no consumer is told twice that a fallback fired. The inventory is published again.

A worker that finds its lease removed (`placewatch forget` while it was cut off, or the key
deleted by hand) does the same from what the compute bucket holds of its node (`lacking`):
what forget said gone is said again, and what it resolved fires again; nothing else does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import nats.errors
import nats.js.errors

from placewatch.schemas import (
    ComputeStatus,
    DecodeError,
    FallbackEvent,
    decode,
    subjects,
    value_headers,
)

from .events import EventTracker, Outgoing, signature
from .outbox import EventOutbox, NodeStatuses, node_statuses

READ_S = 5.0
"""How long the node's keys in the compute bucket are read for, once its lease was removed."""

log = logging.getLogger(__name__)


async def missing(
    outbox: EventOutbox, tracker: EventTracker, statuses: Sequence[ComputeStatus]
) -> list[Outgoing]:
    """The statuses and firing events the stores lack, each with an id of this session."""
    out: list[Outgoing] = []
    firing = tracker.firing()
    waiting = _waiting(outbox)  # stored once the stores take it: not said twice
    for status in statuses:
        shard = status.shard
        status_stored = ("ComputeStatus", shard) in waiting or await _status_stored(
            outbox, tracker.node, status
        )
        fire = (
            shard in firing
            and ("FallbackEvent", shard) not in waiting
            and not await _firing_stored(outbox, tracker.node, status)
        )
        if fire or not status_stored:
            out += tracker.again(status, fire=fire)
    if out:
        log.warning(
            "the stores are back: %d statuses and fallback events stored again, what is true now",
            len(out),
        )
    return out


async def lacking(
    outbox: EventOutbox, tracker: EventTracker, statuses: Sequence[ComputeStatus]
) -> list[Outgoing]:
    """Once the node's lease was found removed: each status the compute bucket no longer
    holds as this session said it, said again, and a firing event for each fallback under
    way that was resolved meanwhile; each with an id of this session.

    Only `placewatch forget` speaks for a node whose worker lives: it says each shard
    `gone` and each fallback resolved, under a session of its own, then removes the node's
    keys. So a key that holds this session's status was left alone (a lease deleted by
    hand), and its fallback fires no second time; a key gone, or holding another session's
    status, was spoken over, and a fallback still under way fires again. The keys are read
    as at the start (node_statuses: a node's own credentials may); where they cannot be
    read whole, nothing is said again, so that no consumer is told twice."""
    try:
        with anyio.fail_after(READ_S):
            left = await node_statuses(outbox.nc, outbox.stores.compute.name, tracker.node)
    except (nats.errors.Error, TimeoutError) as exc:
        left = NodeStatuses(stopped=str(exc) or type(exc).__name__)
    if left.stopped:
        log.warning(
            "cannot read what KV %s holds of node %s (%s): nothing said again",
            outbox.stores.compute.name,
            tracker.node,
            left.stopped,
        )
        return []
    firing, waiting = tracker.firing(), _waiting(outbox)
    out: list[Outgoing] = []
    for status in statuses:
        shard = status.shard
        stored = left.statuses.get(subjects.shard_key(tracker.node, shard))
        ours = stored is not None and stored.session == tracker.session
        kept = ours and stored is not None and signature(stored) == signature(status)
        if kept or (ours and ("ComputeStatus", shard) in waiting):
            continue
        fire = not ours and shard in firing and ("FallbackEvent", shard) not in waiting
        out += tracker.again(status, fire=fire)
    if out:
        log.warning(
            "the node's lease was removed: %d statuses and fallback events stored again, what "
            "is true now",
            len(out),
        )
    return out


def _waiting(outbox: EventOutbox) -> set[tuple[str, str]]:
    """What waits in the outbox, by kind and shard: stored once the stores take it."""
    return {
        (
            type(o.message).__name__,
            o.message.shard if isinstance(o.message, ComputeStatus) else o.message.status.shard,
        )
        for o in outbox.pending
    }


async def _status_stored(outbox: EventOutbox, node: str, status: ComputeStatus) -> bool:
    """Whether the compute bucket's value for the shard says what `status` says; False where
    it holds nothing or something else, True where it cannot be read just now (a cluster
    electing the bucket's leader: its next change stores it)."""
    if outbox.compute is None:
        return False
    try:
        entry = await outbox.compute.get(subjects.shard_key(node, status.shard))
        stored = decode(entry.value or b"", ComputeStatus, value_headers(entry.value or b""))
    except (nats.js.errors.KeyNotFoundError, DecodeError):
        return False
    except (nats.errors.Error, TimeoutError):
        return True
    return signature(stored) == signature(status)


async def _firing_stored(outbox: EventOutbox, node: str, status: ComputeStatus) -> bool:
    """Whether the events stream's last event on the shard's fallback subject is a firing
    one; True where that cannot be read, so that no consumer is told twice that it fired."""
    subject = subjects.fallback(node, status.shard, outbox.prefix)
    try:
        msg = await outbox.js.get_last_msg(outbox.stores.events.name, subject)
    except nats.js.errors.NotFoundError:
        return False
    except (nats.errors.Error, TimeoutError) as exc:
        log.warning("cannot read %s's last fallback event (%s): not stored again", subject, exc)
        return True
    try:
        event = decode(msg.data or b"", FallbackEvent, msg.headers or {})
    except DecodeError:
        return False
    return event.state == "firing"
