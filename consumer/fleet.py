"""The fleet as a gateway sees it: the latest telemetry per node, status per shard.

A gateway that starts late must know the fleet at once, not after every node
has published again, so `start()` first reads what the bus keeps: the last
sample of each node in the stream PLACEWATCH_TELEMETRY and every shard's
latest status in the KV bucket placewatch_compute. Live core subscriptions,
made before that read, keep the view current; the newer message wins, by its
`time`, whichever way it came. A fresh cluster (no stream, no bucket, or no
JetStream at all) is simply an empty fleet.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from placewatch.schemas import (
    FALLBACK_VERDICTS,
    ComputeStatus,
    DecodeError,
    FallbackEvent,
    NodeTelemetry,
    decode,
    subjects,
)
from placewatch.schemas.messages import Verdict
from placewatch.schemas.streams import COMPUTE, TELEMETRY

from .retained import kv_headers, last_per_subject

log = logging.getLogger(__name__)

FILL_TIMEOUT_S = 5.0

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
    is called with each message the view took, from the event loop.
    """

    def __init__(
        self,
        nc: Client,
        prefix: str = subjects.DEFAULT_PREFIX,
        *,
        on_change: Callable[[Message], object] | None = None,
        fill_timeout: float = FILL_TIMEOUT_S,
    ) -> None:
        self.nc = nc
        self.prefix = prefix
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
        for subject in (
            subjects.all_telemetry(self.prefix),
            *subjects.all_events(self.prefix),
        ):
            self._subs.append(await self.nc.subscribe(subject, cb=self._live))
        deadline = time.monotonic() + self.fill_timeout
        for msg in await self._latest(
            TELEMETRY.name, subjects.all_telemetry(self.prefix), deadline
        ):
            self._hold(msg.data, msg.headers, NodeTelemetry)
        for msg in await self._latest(COMPUTE.stream, subjects.kv_subject(COMPUTE.name), deadline):
            headers = msg.headers or {}
            if headers.get(subjects.KV_OPERATION) in subjects.KV_DELETED:
                continue
            self._hold(msg.data, kv_headers(msg.data, headers), ComputeStatus)

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
        """The last message of each subject in `stream`; none when it cannot be read."""
        try:
            return await last_per_subject(self.nc, stream, subject, _left(deadline))
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("cannot read %s (%s); following live messages only", stream, exc)
            return []


_KINDS: dict[str, type[NodeTelemetry] | type[ComputeStatus] | type[FallbackEvent]] = {
    "telemetry": NodeTelemetry,
    "compute": ComputeStatus,
    "fallback": FallbackEvent,
}


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
