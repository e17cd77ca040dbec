"""The fleet as a gateway sees it: the latest telemetry per node, status per shard.

A gateway that starts late must know the fleet at once, not after every node
has published again, so `start()` first reads what the bus keeps: the last
sample of each node in the prefix's telemetry stream (PLACEWATCH_TELEMETRY) and
every shard's latest status in its compute bucket (placewatch_compute). A view
may take one of the partitions the servers' mapping spreads the nodes over
(placewatch.schemas.partitions): then it holds that partition's nodes, live and
from the stream; statuses are not partitioned. Live core subscriptions,
made before that read, keep the view current; the newer message wins, by its
`time`, whichever way it came. A fresh cluster (no stream, no bucket, or no
JetStream at all) is simply an empty fleet.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from placewatch.schemas import (
    FALLBACK_VERDICTS,
    ComputeStatus,
    DecodeError,
    FallbackEvent,
    NodeTelemetry,
    decode,
    partitions,
    subjects,
    value_headers,
)
from placewatch.schemas.codec import HEADER_CONTENT_TYPE
from placewatch.schemas.messages import Verdict
from placewatch.schemas.streams import for_prefix

log = logging.getLogger(__name__)

FILL_TIMEOUT_S = 5.0
FILL_CONSUMER_IDLE_S = 10.0
"""The server removes a fill's ephemeral consumer this long after its last fetch."""
_FILL_BATCH = 256

Message = NodeTelemetry | ComputeStatus | FallbackEvent
ShardKey = tuple[str, str]
"""(node, shard), the exact names the payloads carry."""


class FiringFallback(msgspec.Struct, frozen=True, kw_only=True):
    """A shard placed on GPUs that does not compute (only) on them, as of its latest status."""

    node: str
    shard: str
    verdict: Verdict
    since: datetime
    """When it entered a fallback verdict (the time of that status)."""
    reason: str


class Fleet(msgspec.Struct, frozen=True, kw_only=True):
    """The fleet at one moment, sorted by node and shard."""

    nodes: list[NodeTelemetry]
    shards: list[ComputeStatus]
    firing: list[FiringFallback]


class FleetView:
    """The latest NodeTelemetry per node and ComputeStatus per shard, from the bus.

    `nc` is a connected nats-py client the caller owns (and closes); `on_change`
    is called with each message the view took, from the event loop. `partition`
    of `partitions` (the N of the servers' mapping): that partition's nodes only;
    neither: every node, whether the servers partition them or not.
    """

    def __init__(
        self,
        nc: Client,
        prefix: str = subjects.DEFAULT_PREFIX,
        *,
        partition: int | None = None,
        partitions: int | None = None,
        on_change: Callable[[Message], object] | None = None,
        fill_timeout: float = FILL_TIMEOUT_S,
    ) -> None:
        self.nc = nc
        self.prefix = prefix
        self.stores = for_prefix(prefix)
        self.partition = _partition(partition, partitions)
        self.on_change = on_change
        self.fill_timeout = fill_timeout
        self.nodes: dict[str, NodeTelemetry] = {}
        self.shards: dict[ShardKey, ComputeStatus] = {}
        self.undecodable = 0
        """Messages that were not what their subject and headers said; ignored."""
        self._since: dict[ShardKey, datetime] = {}
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        """Subscribe, then fill from the telemetry stream and the compute bucket."""
        telemetry = partitions.consumer_subject("telemetry", self.prefix, self.partition)
        for subject in (telemetry, *subjects.all_events(self.prefix)):
            self._subs.append(await self.nc.subscribe(subject, cb=self._live))
        deadline = time.monotonic() + self.fill_timeout
        for msg in await self._latest(self.stores.telemetry.name, telemetry, deadline):
            self._hold(msg.data, msg.headers, NodeTelemetry)
        compute = self.stores.compute
        for msg in await self._latest(compute.stream, subjects.kv_subject(compute.name), deadline):
            headers = msg.headers or {}
            if headers.get(subjects.KV_OPERATION) in subjects.KV_DELETED:
                continue
            self._hold(msg.data, _kv_headers(msg.data, headers), ComputeStatus)

    async def stop(self) -> None:
        """Stop following the bus; the view keeps what it knew."""
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(nats.errors.Error):  # closed already: nothing to undo
                await sub.unsubscribe()

    def telemetry(self, node: str) -> NodeTelemetry | None:
        return self.nodes.get(node)

    def status(self, node: str, shard: str) -> ComputeStatus | None:
        return self.shards.get((node, shard))

    def firing(self) -> list[FiringFallback]:
        """Shards whose latest status is a fallback verdict, by node and shard."""
        return [
            FiringFallback(
                node=s.node,
                shard=s.shard,
                verdict=s.verdict,
                since=self._since.get(key, s.time),
                reason=s.reason,
            )
            for key, s in sorted(self.shards.items())
            if s.verdict in FALLBACK_VERDICTS
        ]

    def snapshot(self) -> Fleet:
        return Fleet(
            nodes=[self.nodes[n] for n in sorted(self.nodes)],
            shards=[self.shards[k] for k in sorted(self.shards)],
            firing=self.firing(),
        )

    async def _live(self, msg: Msg) -> None:
        kind = msg.subject[len(self.prefix) + 1 :].split(".", 1)[0]
        type_ = _KINDS.get(kind)
        if type_ is None:
            self.undecodable += 1
            return
        self._hold(msg.data, msg.headers, type_)

    def _hold(
        self,
        data: bytes,
        headers: Mapping[str, str] | None,
        type_: type[NodeTelemetry] | type[ComputeStatus] | type[FallbackEvent],
    ) -> None:
        try:
            message: Message = decode(data, type_, headers)
        except DecodeError as exc:
            self.undecodable += 1
            log.debug("ignored a message: %s", exc)
            return
        if isinstance(message, NodeTelemetry):
            taken = self._telemetry(message)
        elif isinstance(message, FallbackEvent):
            taken = self._status(message.status)
        else:
            taken = self._status(message)
        if taken and self.on_change is not None:
            try:
                self.on_change(message)
            except Exception:
                log.exception("on_change failed for a %s", type(message).__name__)

    def _telemetry(self, t: NodeTelemetry) -> bool:
        held = self.nodes.get(t.node)
        if held is not None and t.time < held.time:
            return False  # the stream's copy of a sample already seen live
        self.nodes[t.node] = t
        return True

    def _status(self, s: ComputeStatus) -> bool:
        key = (s.node, s.shard)
        held = self.shards.get(key)
        if held is not None and s.time < held.time:
            return False
        if held == s:
            return False  # a FallbackEvent carries the status just taken
        self.shards[key] = s
        if s.verdict not in FALLBACK_VERDICTS:
            self._since.pop(key, None)
        elif key not in self._since:
            self._since[key] = s.time
        return True

    async def _latest(self, stream: str, subject: str, deadline: float) -> list[Msg]:
        """The last message of each subject in `stream`; none when there is no such stream."""
        js = self.nc.jetstream()
        name = f"placewatch-view-{secrets.token_hex(6)}"
        config = ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            filter_subject=subject,
            inactive_threshold=FILL_CONSUMER_IDLE_S,
            mem_storage=True,
        )
        try:
            info = await js.add_consumer(stream, config, timeout=_left(deadline))
        except nats.js.errors.NotFoundError:
            return []  # a fresh cluster: no worker has created it yet
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
            return []  # a server without JetStream keeps nothing
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("cannot read %s (%s); following live messages only", stream, exc)
            return []
        found: list[Msg] = []
        pending = info.num_pending or 0
        sub = await js.pull_subscribe_bind(stream=stream, name=name)
        try:
            while pending > 0 and time.monotonic() < deadline:
                try:
                    batch = await sub.fetch(min(pending, _FILL_BATCH), timeout=_left(deadline))
                except (nats.errors.Error, TimeoutError):
                    break
                found += batch
                pending = batch[-1].metadata.num_pending if batch else 0
        finally:
            # Not deleted: the server removes it when idle, so a gateway needs no delete right.
            await sub.unsubscribe()
        return found


_KINDS: dict[str, type[NodeTelemetry] | type[ComputeStatus] | type[FallbackEvent]] = {
    "telemetry": NodeTelemetry,
    "compute": ComputeStatus,
    "fallback": FallbackEvent,
}


def _partition(partition: int | None, count: int | None) -> int | None:
    """The partition a view takes (None: all), or ValueError saying what to give."""
    if partition is None and count is None:
        return None
    if partition is None or count is None:
        raise ValueError(
            f"FleetView(partition={partition}, partitions={count}): give both, the partition "
            "and the N of the servers' mapping, or neither for every node"
        )
    partitions.check(partition, count)
    return partition


def _kv_headers(data: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
    """Headers for a bucket value: nats-py's KV put sends none, so the format is sniffed."""
    return headers if HEADER_CONTENT_TYPE in headers else value_headers(data)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)


__all__ = [
    "FALLBACK_VERDICTS",
    "FiringFallback",
    "Fleet",
    "FleetView",
    "Message",
    "ShardKey",
]
