"""Who holds a node's lease: its key in the leases bucket as the server stored it last, read
from a stream message get (lease.py takes and keeps the lease; `placewatch forget` reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from nats.js.kv import KV_MARKER_REASON

from placewatch.schemas import LEASE_INTERVALS, DecodeError, NodeLease, decode, subjects

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
