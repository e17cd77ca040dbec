"""What a view holds, and what is asked of it: each node's latest telemetry and inventory as
they came (held.py), each shard's latest status, and the answers a gateway wants from them
(capacity.py), the fleet joined, and the shards in fallback."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from placewatch.schemas import (
    FALLBACK_VERDICTS,
    ComputeStatus,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
)
from placewatch.schemas.messages import Verdict

from . import capacity
from .capacity import GpuCandidate, SharedGpu, StaleNode
from .held import Held, Holdings, decoded, join

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
    """The fleet at one moment, sorted by node and shard: each node's sample, its inventory
    and telemetry joined (a node whose inventory the view has not got yet is left out)."""

    nodes: list[NodeSample]
    shards: list[ComputeStatus]
    firing: list[FiringFallback]
    seen: dict[str, float] = msgspec.field(default_factory=dict)
    """Node -> when the view took its latest telemetry (Held.seen)."""
    problems: list[str] = msgspec.field(default_factory=list)
    """What makes the view less than it looks: a view of one partition on servers that
    partition otherwise, or not at all (mapping.py)."""


class FleetState:
    """What a view holds; FleetView keeps it as the bus says."""

    def __init__(self) -> None:
        self.nodes: dict[str, Held] = {}
        """Each node's latest telemetry."""
        self.inventories: dict[str, Held] = {}
        """Each node's latest inventory."""
        self.shards: dict[ShardKey, ComputeStatus] = {}
        self._since: dict[ShardKey, datetime] = {}
        """When each shard in a fallback verdict entered it."""

    def telemetry(self, node: str) -> NodeTelemetry | None:
        """The node's latest telemetry."""
        return decoded(self.nodes.get(node), NodeTelemetry)

    def inventory(self, node: str) -> NodeInventory | None:
        """The node's latest inventory."""
        return decoded(self.inventories.get(node), NodeInventory)

    def sample(self, node: str) -> NodeSample | None:
        """The node's latest telemetry joined with the inventory it names, and its shards'
        pids and reasons from their statuses; None until the view holds both."""
        return join(
            self.nodes.get(node),
            self.inventories.get(node),
            lambda shard: self.shards.get((node, shard)),  # by key: not every shard's walk
        )

    def gpus_for(
        self, nbytes: int, *, max_age: float | None = None, now: datetime | None = None
    ) -> list[GpuCandidate]:
        """The GPUs of live nodes that have `nbytes` free now, the most free first, each
        with its sample's age (placewatch.consumer.capacity). `max_age`: seconds after
        which a node's sample is stale (None: three of its intervals)."""
        return capacity.gpus_for(self.holdings(), nbytes, now or utc_now(), max_age)

    def shared_gpus(
        self, max_age: float | None = None, *, now: datetime | None = None
    ) -> list[SharedGpu]:
        """The GPUs (by uuid) that more than one live node reports: two workers watch one
        machine under two names (gpus_for offers each once)."""
        return capacity.shared_gpus(self.holdings(), now or utc_now(), max_age)

    def stale(
        self, max_age: float | None = None, *, now: datetime | None = None
    ) -> list[StaleNode]:
        """The nodes whose latest sample is older than `max_age` seconds (None: three of
        their intervals), the oldest first."""
        return capacity.stale(self.holdings(), now or utc_now(), max_age)

    def holdings(self, *, statuses: bool = False) -> Holdings:
        """What the view holds now, copied (a dict copy per kind: the Held values are
        shared, never changed); with `statuses`, each node's shards' statuses too (the
        exporter labels a GPU with the pod of the shards on it). Call it on the event loop."""
        held = Holdings(dict(self.nodes), dict(self.inventories))
        if statuses:
            for (node, _), s in self.shards.items():
                held.statuses.setdefault(node, []).append(s)
        return held

    @property
    def fallback_since(self) -> dict[ShardKey, datetime]:
        """When each shard in a fallback verdict entered it (read it, never change it)."""
        return self._since

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

    def problems(self) -> list[str]:
        """What makes the view less than it looks (none here; FleetView checks its partition)."""
        return []

    def snapshot(self) -> Fleet:
        samples = (self.sample(n) for n in sorted(self.nodes))
        return Fleet(
            nodes=[s for s in samples if s is not None],
            shards=[self.shards[k] for k in sorted(self.shards)],
            firing=self.firing(),
            seen={node: held.seen for node, held in self.nodes.items()},
            problems=self.problems(),
        )


def utc_now() -> datetime:
    return datetime.now(UTC)
