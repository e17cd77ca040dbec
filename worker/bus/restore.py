"""What is true now, stored where the stores lack it; what earlier sessions left firing.

A worker that started on a server without JetStream, or whose stream or bucket was deleted,
published its events as core messages (or could not publish them) while there was nowhere to
keep them: a consumer that starts later would read nothing of a shard that fires now. Once the
streams and the compute bucket exist again, the next tick stores each shard's current status
where the bucket's value for its key says something else (or nothing), and a firing event for
each fallback under way where the stream's last event on its subject is not a firing one, so
that no consumer is told twice that a fallback fired. The inventory is published again. A
lease found removed (`placewatch forget` while the worker was cut off, or a person deleting
the key) is answered the same way: what forget resolved fires again, and nothing else does.

A worker that starts reads the last fallback event of each of its node's shards
(`fallbacks_left`): one whose last event is a firing one is under way, and not fired again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import nats.errors
import nats.js.errors

from placewatch.retained import Incomplete, last_per_subject
from placewatch.schemas import (
    ComputeStatus,
    DecodeError,
    FallbackEvent,
    decode,
    on_own_subject,
    subjects,
    value_headers,
)

from .events import EventTracker, Outgoing, signature
from .outbox import EventOutbox

log = logging.getLogger(__name__)


async def missing(
    outbox: EventOutbox,
    tracker: EventTracker,
    statuses: Sequence[ComputeStatus],
    why: str = "the stores are back",
) -> list[Outgoing]:
    """The statuses and firing events the stores lack, each with an id of this session;
    `why` they may lack them starts the line that says how many."""
    out: list[Outgoing] = []
    firing = tracker.firing()
    # What waits in the outbox is stored once the stores take it: not said twice.
    waiting = {
        (
            type(o.message).__name__,
            o.message.shard if isinstance(o.message, ComputeStatus) else o.message.status.shard,
        )
        for o in outbox.pending
    }
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
            "%s: %d statuses and fallback events stored again, what is true now", why, len(out)
        )
    return out


async def fallbacks_left(
    outbox: EventOutbox, node: str, within: float
) -> dict[str, FallbackEvent] | None:
    """Each of `node`'s shards' last fallback event in the events stream, by shard: what
    earlier sessions (or `placewatch forget`) left firing or resolved. None where the
    stream cannot be read within `within` seconds: the compute bucket then decides
    (EventTracker.seed)."""
    subject = subjects.node_fallbacks(node, outbox.prefix)
    try:
        kept = await last_per_subject(
            outbox.nc, outbox.stores.events.name, subject, within, complete=True
        )
    except (nats.errors.Error, TimeoutError, Incomplete) as exc:
        log.warning(
            "cannot read %s's last fallback events (%s): the compute bucket says which fire",
            node,
            str(exc) or type(exc).__name__,
        )
        return None
    found: dict[str, FallbackEvent] = {}
    for msg in kept:
        try:
            event = decode(msg.data or b"", FallbackEvent, msg.headers or {})
        except DecodeError:
            continue
        if on_own_subject(event, msg.subject):
            found[event.status.shard] = event
    return found


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
