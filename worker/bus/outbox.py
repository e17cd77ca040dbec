"""Compute statuses and fallback events: never lost, stored once.

Events go to the prefix's events stream (PLACEWATCH_EVENTS) with a Nats-Msg-Id, and
wait in a bounded outbox until the stream acknowledges them, across
disconnects; a retried publish inside the stream's duplicate window is
stored once. The latest status of each shard is also put in the prefix's compute
bucket (placewatch_compute), for a consumer that starts late. Without JetStream (a
plain core server) events go out as core messages, and the worker says so
once.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from dataclasses import dataclass, field

import anyio
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.kv import KeyValue

from placewatch.schemas import (
    ComputeStatus,
    DecodeError,
    decode,
    subjects,
    value_headers,
)
from placewatch.schemas.codec import Encoding
from placewatch.schemas.streams import for_prefix

from .events import Outgoing
from .fit import fit
from .kvfollow import Values, follow
from .streams import StreamSettings, ensure_stream, made_bucket

log = logging.getLogger(__name__)

JETSTREAM_RECHECK_S = 5.0
"""How often a worker on a server without JetStream asks again whether it has it now: one
request, cheap, and soon enough that the worker takes its lease before a second one could."""
PREVIOUS_HEARTBEAT_S = 1.0
"""The server's heartbeat while the statuses of an earlier session are read."""


MAX_PENDING = 10_000
PUBLISH_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class StoresAppeared:
    """Told to the tick loop (`EventOutbox.appearances`): the streams and buckets exist again
    after a time without (no JetStream, a stream deleted), so what is true now is to be stored
    (restore.py) and the inventory published again."""


@dataclass
class NodeStatuses:
    """What one node's keys in the compute bucket hold."""

    statuses: dict[str, ComputeStatus] = field(default_factory=dict)
    """By key: the latest status of each of the node's shards."""
    unreadable: list[str] = field(default_factory=list)
    """Keys whose value is not a ComputeStatus."""
    stopped: str = ""
    """Why the read stopped before the last key, if it did."""


async def node_values(nc: Client, bucket: str, node: str) -> tuple[Values, str]:
    """The latest value of each of `node`'s keys in `bucket` (placements or compute), read
    once, and why the read stopped early ("" when it did not). Raises nats.errors.Error when
    they cannot be read (no bucket, no JetStream, no permission)."""
    found: Values = {}
    stopped = await follow(
        nc, bucket, subjects.node_keys(node), heartbeat=PREVIOUS_HEARTBEAT_S, latest=found.update
    )
    return found, stopped


async def node_statuses(nc: Client, bucket: str, node: str) -> NodeStatuses:
    """The latest status under each of `node`'s keys in the compute bucket `bucket` (as
    node_values reads them)."""
    found, stopped = await node_values(nc, bucket, node)
    left = NodeStatuses(stopped=stopped)
    for key, value in sorted(found.items()):
        if value is None:
            continue  # deleted
        try:
            left.statuses[key] = decode(value, ComputeStatus, value_headers(value))
        except DecodeError:
            left.unreadable.append(key)
    return left


class EventOutbox:
    def __init__(
        self,
        nc: Client,
        prefix: str = subjects.DEFAULT_PREFIX,
        encoding: Encoding = "json",
        max_pending: int = MAX_PENDING,
        streams: StreamSettings | None = None,
    ) -> None:
        self.streams = streams or StreamSettings()
        self.nc = nc
        self.js = nc.jetstream(timeout=PUBLISH_TIMEOUT_S)
        self.prefix = prefix
        self.stores = for_prefix(prefix)
        self.encoding: Encoding = encoding
        self.pending: deque[Outgoing] = deque()
        self.max_pending = max_pending
        self.dropped = 0
        self.core_only = False
        self._set_up = False
        self._stored = False
        """An event went to the stream: stores made after that lack what was said before."""
        self.compute: KeyValue | None = None
        self._appeared, self.appearances = anyio.create_memory_object_stream[StoresAppeared](1)
        """Each StoresAppeared, for the tick loop alone to receive; one waiting stands for any
        number."""
        self._failing = False

    def add(self, items: list[Outgoing]) -> None:
        for item in items:
            if len(self.pending) >= self.max_pending:
                lost = self.pending.popleft()
                self.dropped += 1
                log.error(
                    "event outbox full (%d): dropped %s %s; the bus has been away too long",
                    self.max_pending,
                    lost.subject,
                    lost.msg_id,
                )
            self.pending.append(item)

    async def setup(self) -> None:
        """Create the streams and the compute bucket when missing (and allowed)."""
        try:
            created = [await ensure_stream(self.js, s, self.streams) for s in self.stores.streams]
            self.compute, made = await made_bucket(self.js, self.stores.compute, self.streams)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            self._no_jetstream()
        else:
            if self.core_only:
                log.warning(
                    "the server has JetStream now: events go to the stream %s from here on",
                    self.stores.events.name,
                )
            # Stores made after events went to them lack what the worker said before.
            if self.core_only or (self._stored and (any(created) or made)):
                with contextlib.suppress(anyio.WouldBlock):  # the tick has not heard it yet
                    self._appeared.send_nowait(StoresAppeared())
            self.core_only = False
        self._set_up = True

    async def keep_set_up(self, every: float = JETSTREAM_RECHECK_S) -> None:
        """Make the streams and buckets, and again every `every` seconds while the server has
        no JetStream or cannot be asked: a server restarted with JetStream, or given it later,
        gets them then, and events go to the stream from then on. Returns once they exist."""
        said = ""
        while True:
            try:
                await self.setup()
            except (nats.errors.Error, TimeoutError) as exc:
                why = str(exc) or type(exc).__name__
                if why != said:
                    log.warning(
                        "streams and buckets not ready yet (%s); tried again every %g s and "
                        "with the next event",
                        why,
                        every,
                    )
                said = why
            else:
                if not self.core_only:
                    return
            await anyio.sleep(every)

    async def previous(self, node: str) -> list[ComputeStatus]:
        """The statuses an earlier session of this node left in the compute bucket.

        Reads this node's keys only (not the fleet's), their latest values. No bucket (a
        first start) or no JetStream: none.
        """
        try:
            left = await node_statuses(self.nc, self.stores.compute.name, node)
        except (nats.errors.Error, TimeoutError):
            return []  # nothing to carry over
        if left.stopped:
            log.warning(
                "the statuses node %s's last session left in KV %s were not read (%s): a "
                "fallback it left firing is not resolved by this session",
                node,
                self.stores.compute.name,
                left.stopped,
            )
        return list(left.statuses.values())

    def _no_jetstream(self) -> None:
        if not self.core_only:
            log.warning(
                "the server has no JetStream: events go out as core messages, not stored; "
                "enable JetStream (nats-server -js) so none is lost"
            )
        self.core_only = True

    async def flush(self) -> int:
        """Publish what is pending, oldest first, until one fails; the number published."""
        if not self.pending or not self.nc.is_connected:
            return 0
        if not self._set_up:
            try:
                await self.setup()
            except (nats.errors.Error, TimeoutError) as exc:
                self._report(exc)
                return 0
        sent = 0
        while self.pending:
            item = self.pending[0]
            fitted = fit(item.message, self.nc.max_payload, self.encoding, item.msg_id)
            if fitted is None:
                self.pending.popleft()
                self.dropped += 1
                log.error(
                    "%s %s dropped: even trimmed it is larger than the server's max_payload (%d "
                    "bytes); raise max_payload in the server's configuration",
                    item.subject,
                    item.msg_id,
                    self.nc.max_payload,
                )
                continue
            if fitted.trimmed:
                log.warning(
                    "%s %s trimmed to fit the server's max_payload: left out %s",
                    item.subject,
                    item.msg_id,
                    fitted.omitted,
                )
            payload, headers = fitted.payload, fitted.headers
            try:
                if self.core_only:
                    await self.nc.publish(item.subject, payload, headers=headers)
                else:
                    await self.js.publish(item.subject, payload, headers=headers)
                    self._stored = True
                    if item.kv_key and self.compute is not None:
                        await self.compute.put(item.kv_key, payload)
            except nats.js.errors.NoStreamResponseError:
                self._set_up = False  # the stream went away: create it again next time
                self._report(RuntimeError(f"no stream takes {item.subject}"))
                break
            except (nats.errors.Error, TimeoutError) as exc:
                self._report(exc)
                break
            self.pending.popleft()
            sent += 1
        else:
            if self._failing:
                log.info("events flowing again")
            self._failing = False
        return sent

    def _report(self, exc: BaseException) -> None:
        if not self._failing:
            log.warning(
                "events not acknowledged (%s); %d kept and retried",
                str(exc) or type(exc).__name__,
                len(self.pending),
            )
        self._failing = True
