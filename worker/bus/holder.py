"""Who holds a node's lease: its key in the leases bucket as the server stored it last, read
from a stream message get (lease.py takes and keeps the lease; `placewatch forget` reads it),
or the worker that answers on the node's micro service; and what a worker says of either."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import nats.errors
from nats.aio.client import Client
from nats.js.kv import KV_MARKER_REASON

from placewatch.schemas import (
    LEASE_INTERVALS,
    DecodeError,
    NodeLease,
    NodeTelemetry,
    decode,
    subjects,
)

from .kvfollow import EXPIRED


@dataclass(frozen=True)
class Holder:
    """The node's key in the leases bucket, as the server stored it last."""

    revision: int
    stored: datetime
    """The server's timestamp of the entry."""
    lease: NodeLease | None
    """None: a delete marker, or a value that is not a lease."""
    deleted: bool = False
    size: int = 0

    def expires(self, own_interval_s: float) -> datetime:
        """LEASE_INTERVALS of its holder's intervals after it was stored; for a value that is
        not a lease, of this worker's."""
        if self.lease is not None:
            return self.lease.expires(self.stored)
        return self.stored + timedelta(seconds=LEASE_INTERVALS * own_interval_s)

    def live(self, now: datetime, own_interval_s: float) -> bool:
        return not self.deleted and now < self.expires(own_interval_s)

    def who(self) -> str:
        if self.lease is None:
            return f"a value that is not a placewatch lease ({self.size} bytes)"
        return f"host {self.lease.host}, pid {self.lease.pid}, session {self.lease.session}"


def holder_of(
    revision: int, stored: datetime, data: bytes | None, headers: Mapping[str, str] | None
) -> Holder:
    """The entry a stream message get returned, read; never raises on what the value holds."""
    headers = headers or {}
    if (
        headers.get(subjects.KV_OPERATION) in subjects.KV_DELETED
        or headers.get(KV_MARKER_REASON) in EXPIRED
    ):
        return Holder(revision, stored, None, deleted=True)
    try:
        lease: NodeLease | None = decode(data or b"", NodeLease)
    except DecodeError:
        lease = None
    return Holder(revision, stored, lease, size=len(data or b""))


TAKEOVER = "start this one with --takeover (PLACEWATCH_TAKEOVER=true)"
OWN_NODE = "if the two watch different nodes, give each its own --node"
ANSWER_S = 1.0
"""How long a worker about to take a node with no live lease waits for a live worker of that
node to answer on the node's micro service."""


async def answering(nc: Client, lease: NodeLease, prefix: str) -> str | None:
    """The session of another worker of `lease`'s node that answers on the node's micro
    service now, or None when none does ("?" for an answer that names none)."""
    subject = f"{subjects.service(lease.node, prefix)}.telemetry"
    try:
        reply = await nc.request(subject, b"", timeout=ANSWER_S)
    except (nats.errors.Error, TimeoutError):
        return None  # no responders, no answer, or not allowed to ask: nobody known
    try:
        session = decode(reply.data, NodeTelemetry, reply.headers).session
    except DecodeError:
        return "?"  # an answer all the same (no sample yet): someone serves the node
    return None if session == lease.session else session


def held_message(node: str, holder: Holder, now: datetime, own_interval_s: float) -> str:
    age = max((now - holder.stored).total_seconds(), 0.0)
    left = max((holder.expires(own_interval_s) - now).total_seconds(), 0.0)
    if holder.lease is None:
        return (
            f"node {node}'s lease key holds {holder.who()}, written {age:.1f} s ago: it counts "
            f"as held for {left:.1f} s more ({LEASE_INTERVALS} of this worker's intervals). "
            f"Start this one again then, or {TAKEOVER} to write over it"
        )
    return (
        f"node {node} is held by another live worker: {holder.who()}; its lease was refreshed "
        f"{age:.1f} s ago (every {holder.lease.interval_s:g} s) and expires in {left:.1f} s "
        f"unless refreshed again. Stop it, or {TAKEOVER} to take the node from it; {OWN_NODE}"
    )


def answering_message(node: str, subject: str, session: str, bucket: str) -> str:
    return (
        f"node {node} is held by a live worker that answers on {subject} (session {session}), "
        f"though its lease in KV {bucket} is missing or expired (the bucket deleted, the key "
        "removed by hand, or refreshes that did not get through): that worker writes it again "
        f"at its next refresh. Stop it, or {TAKEOVER} to take the node from it; {OWN_NODE}"
    )


def lost_message(node: str, holder: Holder) -> str:
    return (
        f"node {node} was taken over by another worker: {holder.who()} (started with "
        f"--takeover, or this worker's lease went {LEASE_INTERVALS} intervals unrefreshed); "
        f"this worker stops publishing for it. Stop one of the two; {OWN_NODE}"
    )
