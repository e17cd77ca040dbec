"""One live worker per node name: a lease in the prefix's leases bucket (placewatch_leases).

Two workers given one node name publish over each other: the second one's
first tick finds none of the first one's shards "placed or found since the
worker restarted" and resolves its live fallback alerts, and neither says a
word. So a worker takes its node's lease before it publishes anything and
refreshes it every interval; a second worker finds it live and exits,
saying who holds it, unless told to take it over (`--takeover`).

A refresh goes out with a tick's telemetry (`with_telemetry`): one write to the
socket for both, at the moment the worker is awake anyway, rather than a wake of
its own at another moment of the interval (7 % of a tick's CPU, docs/benchmarks.md). A tick
that is late or stuck does not hold the lease back: it is written on its own
REFRESH_LATEST intervals after the last write, well before LEASE_INTERVALS.

Every write names the revision it replaces (JetStream's expected last
subject sequence; 0: the key has no value), so of two workers that write at
once the server refuses all but one, and a refresh never overwrites a lease
another worker took. A lease not refreshed for LEASE_INTERVALS of its
holder's intervals has expired, judged by the server's timestamp of the
entry, never by the holder's clock. nats-py's `KeyValue.get` leaves an
entry's `created` empty (nats-py 2.16: only its watcher fills it in), so the
holder is read with a stream message get, whose answer carries the time the
server stored it. That is compared with the server's time now, not this node's: each
take asks the server's time (clock.py) and keeps how far this node's clock is off it. A
node whose clock NTP left a minute off thus neither waits out a dead worker's lease for a
minute more nor takes a live one, and says once how far off it is. A server that gives no
time leaves this node's clock to judge.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio
import nats.errors
import nats.js.errors
from anyio.abc import TaskStatus
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from placewatch.schemas import (
    LEASE_INTERVALS,
    NodeLease,
    encode,
    subjects,
)
from placewatch.schemas.streams import for_prefix

from .clock import CLOCK_OFF_S, clock_offset, describe, now_utc
from .holder import (
    OWN_NODE,
    Holder,
    answering,
    answering_message,
    held_message,
    holder_of,
    lost_message,
)
from .outbox import JETSTREAM_RECHECK_S
from .streams import StreamSettings, ensure_bucket

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""The pause between tries to take the lease while the server does not answer."""
REFRESH_LATEST = 1.5
"""Intervals after the last write when the lease is written with no tick to go with."""
REFRESH_SOONEST = 0.5
"""Intervals after the last write before a tick brings the next: an asked tick soon after
one at the cadence adds no write."""
WRITE_TRIES = 5
"""Writes refused because the lease changed in between, before giving up."""
RELEASE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class LeaseRemoved:
    """Told to the tick loop (`LeaseKeeper.removals`): a refresh found this worker's lease
    removed by someone else (`placewatch forget` while this worker could not refresh, or
    `nats kv del`) and took it again. What the bus kept of this node may be gone, so the
    worker says again what the bus lacks of it (bus/restore.py), and its inventory."""


class LeaseHeld(Exception):
    """Another live worker holds this node's name; the message says who and what to do."""


class LeaseLost(Exception):
    """Another worker took this node's lease from this one; the message says who."""


def node_lease(node: str, session: str, interval_s: float) -> NodeLease:
    """The lease this process writes for `node`."""
    return NodeLease(
        node=node,
        session=session,
        host=socket.gethostname(),
        pid=os.getpid(),
        started=now_utc(),
        interval_s=interval_s,
    )


def failure(exc: BaseException) -> str:
    """What went wrong, in a few words: the server's description, or no answer."""
    if isinstance(exc, TimeoutError):
        return "no answer"
    description = getattr(exc, "description", None)
    return str(description or exc or type(exc).__name__)


NOT_ALLOWED = (
    "; a refusal of this node's credentials is logged as such, and docs/operations.md (Least "
    "privilege) lists what they need"
)
"""Said of a request that had no answer: the server drops one the credentials may not make,
and its Permissions Violation reaches the connection's error callback, not the request."""


class LeaseKeeper:
    """Takes the node's lease, keeps it refreshed, and gives it back when the worker stops."""

    def __init__(
        self,
        lease: NodeLease,
        streams: StreamSettings,
        *,
        prefix: str = subjects.DEFAULT_PREFIX,
        takeover: bool = False,
        clock: Callable[[], datetime] = now_utc,
    ) -> None:
        self.lease = lease
        self.prefix = prefix
        self.bucket = for_prefix(prefix).leases
        self.key = subjects.lease_key(lease.node)
        self.value = encode(lease)[0]
        self.streams = streams
        self.takeover = takeover
        self.clock = clock
        self.revision: int | None = None
        """The revision of the entry this worker wrote last; None while it holds no lease."""
        self.clock_offset_s: float | None = None
        """The server's clock minus this node's, as the last take measured it; None where the
        server did not say."""
        self.ended: LeaseHeld | LeaseLost | None = None
        self._removed, self.removals = anyio.create_memory_object_stream[LeaseRemoved](1)
        """Each LeaseRemoved, for the tick loop alone to receive; one waiting stands for any
        number."""
        self._kv: KeyValue | None = None
        self._written = time.monotonic()
        """When the lease was last written (tried), by the monotonic clock."""
        self._due = anyio.Event()
        """Set by a tick that brings the next refresh."""

    async def keep(
        self,
        nc: Client,
        scope: anyio.CancelScope,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Take the lease, then say so (`started`) and refresh it every interval. Another worker
        holding it ends the worker: why is kept in `ended`, and `scope` is cancelled (before
        `started`, when it is live at the start).

        Without JetStream there is no lease: say so, start, and try again every
        JETSTREAM_RECHECK_S, as the outbox does for the streams."""
        js = nc.jetstream(timeout=min(max(self.lease.interval_s, 0.5), 2.0))
        try:
            held = await self._take(nc, js, publishing=False)
            task_status.started()
            while not held:
                await anyio.sleep(JETSTREAM_RECHECK_S)
                try:
                    held = await self._take(nc, js, publishing=True)
                except LeaseHeld as exc:
                    # This worker ran first, without a lease to take: the one that took the
                    # node meanwhile keeps it, and this one stops as one taken over does.
                    raise LeaseLost(str(exc)) from None
            await self._refresh(js)
        except (LeaseHeld, LeaseLost) as exc:
            self.ended = exc
            scope.cancel()

    def with_telemetry(self) -> None:
        """A tick is about to publish its telemetry: a refresh due by then goes out with it,
        its write queued on the connection before the telemetry's is sent."""
        if time.monotonic() - self._written >= REFRESH_SOONEST * self.lease.interval_s:
            self._due.set()

    def check(self) -> None:
        """Raise why the lease ended the worker, if it did."""
        if self.ended is not None:
            raise self.ended

    async def _take(self, nc: Client, js: JetStreamContext, *, publishing: bool) -> bool:
        """Take the lease, trying again while the server does not answer; False: no JetStream.
        `publishing`: the worker runs already (it started on a server without JetStream)."""
        said = ""
        waiting = "" if publishing else "nothing is published until it is taken; "
        while True:
            try:
                # A worker that publishes already asks no one: the other answers it, and it
                # answers the other.
                await self.take_once(nc, js, ask=not publishing)
                return True
            except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
                if not publishing:
                    log.warning(
                        "the server has no JetStream: no lease is taken for node %s, so a second "
                        "worker with this name is not refused; asked again every %g s (enable "
                        "JetStream: nats-server -js)",
                        self.lease.node,
                        JETSTREAM_RECHECK_S,
                    )
                return False
            except (nats.errors.Error, TimeoutError) as exc:
                why = failure(exc) + (NOT_ALLOWED if isinstance(exc, TimeoutError) else "")
                if why != said:
                    log.warning(
                        "cannot take node %s's lease in KV %s yet (%s); %strying again every %g s",
                        self.lease.node,
                        self.bucket.name,
                        why,
                        waiting,
                        RETRY_S,
                    )
                else:  # said once: a try that fails alike is said at DEBUG only
                    log.debug("still cannot take node %s's lease (%s)", self.lease.node, why)
                said = why
            await anyio.sleep(RETRY_S)

    async def take_once(self, nc: Client, js: JetStreamContext, *, ask: bool = True) -> None:
        """One try to take the lease, as it is taken at start: LeaseHeld when another live
        worker holds it (and not `takeover`), nats-py's errors as they come. With `ask`, a
        lease that is missing or expired is taken only once no worker of the node answers
        on its micro service: a live worker whose lease was deleted keeps its node."""
        self._kv = await ensure_bucket(js, self.bucket, self.streams)
        await self._measure_clock(nc)
        if ask and not self.takeover:
            holder = await self._read(js)
            live = holder is not None and holder.live(self.server_now(), self.lease.interval_s)
            if not live and (session := await answering(nc, self.lease, self.prefix)) is not None:
                subject = f"{subjects.service(self.lease.node, self.prefix)}.telemetry"
                message = answering_message(self.lease.node, subject, session, self.bucket.name)
                raise LeaseHeld(message)
        await self._write(js, 0, refreshing=False)

    async def holder(self, nc: Client, js: JetStreamContext) -> Holder | None:
        """Who holds the lease now, as the server stored it (None: nobody ever did), this
        node's clock measured against the server's for `server_now`."""
        await self._measure_clock(nc)
        try:
            await js.stream_info(self.bucket.stream)
        except nats.js.errors.NotFoundError:
            return None  # no worker ever took a lease under this prefix
        return await self._read(js)

    async def _refresh(self, js: JetStreamContext) -> None:
        """Write the lease again every interval, with a tick's telemetry or on its own, until
        the worker stops or another takes it."""
        failing = False
        while True:
            self._due = anyio.Event()
            latest = self._written + REFRESH_LATEST * self.lease.interval_s
            with anyio.move_on_after(latest - time.monotonic()):
                await self._due.wait()
            try:
                if self._kv is None:
                    self._kv = await ensure_bucket(js, self.bucket, self.streams)
                await self._write(js, self.revision or 0, refreshing=True)
            except nats.js.errors.NoStreamResponseError:
                self._kv = None  # the bucket went away: made again on the next try
                failing = self._unrefreshed("no stream takes the lease", failing)
            except (nats.errors.Error, TimeoutError) as exc:
                failing = self._unrefreshed(failure(exc), failing)
            else:
                if failing:
                    log.info("node %s's lease refreshed again", self.lease.node)
                failing = False

    def _unrefreshed(self, why: str, failing: bool) -> bool:
        if not failing:
            log.warning(
                "node %s's lease not refreshed (%s); tried again every %g s: %g s after the last "
                "refresh another worker may take the node",
                self.lease.node,
                why,
                self.lease.interval_s,
                LEASE_INTERVALS * self.lease.interval_s,
            )
        return True

    async def _write(self, js: JetStreamContext, last: int, *, refreshing: bool) -> None:
        """Write the lease over revision `last`; when the server refuses it because the key
        changed since, read who holds it now and decide: ours (a write whose answer was lost),
        none (deleted: write again; in a refresh, someone removed it: `removed`), another's
        (held, expired, or taken from us)."""
        assert self._kv is not None
        self._written = time.monotonic()
        taken_from: Holder | None = None
        removed = False
        for _ in range(WRITE_TRIES):
            try:
                self.revision = await self._kv.update(self.key, self.value, last=last)
            except nats.js.errors.KeyWrongLastSequenceError:
                holder = await self._read(js)
            else:
                self._say_taken(taken_from, refreshing)
                return
            if holder is None or holder.deleted:
                if refreshing and not removed:  # by another: this worker deletes its own
                    removed = True  # lease only as it stops
                    self._say_removed()
                last, taken_from = (holder.revision if holder else 0), None
                continue
            if holder.lease is not None and holder.lease.session == self.lease.session:
                self.revision = holder.revision
                return
            if refreshing:
                log.warning("%s", lost_message(self.lease.node, holder))
                raise LeaseLost(lost_message(self.lease.node, holder))
            now = self.server_now()
            if holder.live(now, self.lease.interval_s) and not self.takeover:
                raise LeaseHeld(held_message(self.lease.node, holder, now, self.lease.interval_s))
            last, taken_from = holder.revision, holder
        contested = (
            f"node {self.lease.node}'s lease changed {WRITE_TRIES} times while this worker wrote "
            "it: other workers with this name are starting now"
        )
        raise LeaseLost(contested) if refreshing else LeaseHeld(f"{contested}; {OWN_NODE}")

    def server_now(self) -> datetime:
        """The server's time now: this node's clock, set right by the offset last measured."""
        return self.clock() + timedelta(seconds=self.clock_offset_s or 0.0)

    async def _measure_clock(self, nc: Client) -> None:
        """Keep this node's clock's offset from the server's; say once a clock that is off."""
        offset = await clock_offset(nc, self.bucket.stream, self.clock)
        if offset is None:
            return
        said, self.clock_offset_s = self.clock_offset_s, offset
        if abs(offset) > CLOCK_OFF_S and (said is None or abs(said) <= CLOCK_OFF_S):
            log.warning(
                "this node's clock is %s: the times in its messages are off by as much "
                "(consumers age them by their arrival, and the lease is judged by the "
                "server's time); check NTP on this node (timedatectl, chronyc tracking)",
                describe(offset),
            )

    async def _read(self, js: JetStreamContext) -> Holder | None:
        """The key's last entry, with the server's timestamp; None when it has none.

        A direct get of the one key: its reply carries the server's time (Nats-Time-Stamp),
        which nats-py's KV get leaves out, and its subject names the key, so a node's
        credentials may read its own lease and no other (docs/operations.md)."""
        subject = subjects.kv_subject(self.bucket.name, self.key)
        try:
            msg = await js.get_msg(self.bucket.stream, subject=subject, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        return holder_of(msg.seq or 0, msg.time or self.clock(), msg.data, msg.headers)

    def _say_removed(self) -> None:
        with contextlib.suppress(anyio.WouldBlock):  # the tick has not heard the last one yet
            self._removed.send_nowait(LeaseRemoved())
        log.warning(
            "node %s's lease was removed while this worker held it (`placewatch forget` while "
            "it could not refresh, or deleted by hand): taken again; what the bus lacks of what "
            "this worker said (a status, a fallback resolved meanwhile) and the inventory are "
            "published again",
            self.lease.node,
        )

    def _say_taken(self, taken_from: Holder | None, refreshing: bool) -> None:
        node = self.lease.node
        if taken_from is None:
            if not refreshing:
                log.info(
                    "node %s's lease taken (session %s), refreshed every %g s",
                    node,
                    self.lease.session,
                    self.lease.interval_s,
                )
        elif taken_from.live(self.server_now(), self.lease.interval_s):
            log.warning(
                "node %s's lease taken over from %s (--takeover): that worker stops at its next "
                "refresh",
                node,
                taken_from.who(),
            )
        elif taken_from.lease is None:
            log.info("node %s's lease taken; its key held %s", node, taken_from.who())
        else:
            log.info("node %s's lease taken; %s had let it expire", node, taken_from.who())

    async def release(self) -> None:
        """Delete the lease this worker holds (only if it is still the entry it wrote), so that
        a worker started next takes it at once rather than after it expires."""
        kv, revision = self._kv, self.revision
        if kv is None or revision is None or self.ended is not None:
            return
        why = f"no answer within {RELEASE_TIMEOUT_S:g} s"
        with anyio.move_on_after(RELEASE_TIMEOUT_S, shield=True):
            try:
                await kv.delete(self.key, last=revision)
            except (nats.errors.Error, TimeoutError) as exc:
                why = failure(exc)
            else:
                self.revision = None
                return
        log.info(
            "node %s's lease not given back (%s); it expires %g s after its last refresh",
            self.lease.node,
            why,
            LEASE_INTERVALS * self.lease.interval_s,
        )
