"""Blindness as alerts of their own: a shard whose verdict has stood without evidence longer
than a limit (`--blind-after`), and a node none of whose GPU tools has answered as long
(schemas/evidence.py says when each is blind); pure, no I/O.

A lost verdict resolves nothing (docs/shards.md, Lost evidence), so a node blind for good
would be silent for good: its fallbacks held, its healthy shards held healthy, nothing new
known. So being blind past the limit fires `PlacewatchShardBlind` or `PlacewatchNodeBlind`,
and ends when evidence is back: a fresh status, a telemetry in which a GPU tool answered, the
node forgotten.

Times are this process's clock (seconds since the epoch). A shard's blindness starts when
the server stored its stale status less how long before that its evidence was last had
(the status's `time` less its `stale_since`, both the node's clock), so a node whose clock
is off moves nothing. A node's starts at the first of its telemetry that said it blind; a
node blind at the first telemetry this process reads of it (a restart) is taken to be blind
since the latest evidence of its stale shards, which went stale with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from placewatch.schemas import ComputeStatus, NodeTelemetry
from placewatch.schemas.evidence import gpu_sources, node_blind

from .reconcile import ShardKey

SHARD_BLIND = "PlacewatchShardBlind"
NODE_BLIND = "PlacewatchNodeBlind"
FAILING_CHARS = 400
"""What the failing tools said, at most: it comes from the node, and goes in an annotation."""

BlindKey = tuple[str, str | None]
"""A node and its shard, or the node itself (None)."""


@dataclass(frozen=True)
class Blind:
    """One blindness alert: of a shard, or of a node (`shard` None); since when, what was
    lost (the shard's reason, or what its node's failing GPU tools said), and `ends` once
    evidence is back."""

    node: str
    shard: str | None
    since: float
    lost: str
    ends: float | None = None

    @property
    def key(self) -> BlindKey:
        return (self.node, self.shard)


@dataclass
class NodeSight:
    """What a node's telemetry last said of its GPU tools."""

    blind_since: float | None
    """When its telemetry first said it blind; None while a GPU tool answers."""
    failing: str = ""
    at_first: bool = False
    """It was blind at the first telemetry this process read of it."""
    had_gpus: bool = False
    """Its telemetry has read GPUs: a node whose tools then vanish (not found) is blind."""


class Blindness:
    """Each node's GPU tools as its telemetry says them, and the blindness alerts that fire."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.nodes: dict[str, NodeSight] = {}
        self.firing: dict[BlindKey, Blind] = {}

    def saw(self, telemetry: NodeTelemetry, at: float) -> None:
        """The node's telemetry, taken at `at`."""
        held = self.nodes.get(telemetry.node)
        had_gpus = bool(telemetry.gpus) or (held is not None and held.had_gpus)
        if not node_blind(telemetry, had_gpus):
            self.nodes[telemetry.node] = NodeSight(None, had_gpus=had_gpus)
            return
        failing = "; ".join(
            f"{s.name}: {s.error or 'no answer'}" for s in gpu_sources(telemetry.sources)
        )[:FAILING_CHARS]
        if held is not None and held.blind_since is not None:
            held.failing = failing
        else:
            self.nodes[telemetry.node] = NodeSight(at, failing, held is None, had_gpus)

    def forget(self, node: str) -> None:
        """The node is gone for good (`placewatch forget`): its blindness ends."""
        self.nodes.pop(node, None)

    def plan(
        self,
        statuses: Mapping[ShardKey, ComputeStatus],
        stored: Mapping[ShardKey, float | None],
        now: float,
    ) -> list[Blind]:
        """What to post at `now`: each blindness past the limit that does not fire yet, and
        the end of each that fires and is over."""
        wanted: dict[BlindKey, Blind] = {}
        for key, status in statuses.items():
            since = shard_since(status, stored.get(key))
            if since is not None and now - since >= self.limit_s:
                wanted[key] = Blind(status.node, status.shard, since, status.reason)
        for node, sight in self.nodes.items():
            if sight.blind_since is None:
                continue
            since = self._node_since(node, sight, statuses, stored)
            if now - since >= self.limit_s:
                wanted[(node, None)] = Blind(node, None, since, sight.failing)
        posts = [b for key, b in wanted.items() if key not in self.firing]
        posts += [replace(b, ends=now) for key, b in self.firing.items() if key not in wanted]
        return sorted(posts, key=lambda b: (b.node, b.shard or ""))

    def commit(self, posts: Iterable[Blind]) -> None:
        """Alertmanager took `posts`."""
        for b in posts:
            if b.ends is None:
                self.firing[b.key] = b
            else:
                self.firing.pop(b.key, None)

    def firing_alerts(self) -> list[Blind]:
        """Every blindness alert that fires, by node and shard: posted again so that none
        expires."""
        return [self.firing[key] for key in sorted(self.firing, key=lambda k: (k[0], k[1] or ""))]

    def _node_since(
        self,
        node: str,
        sight: NodeSight,
        statuses: Mapping[ShardKey, ComputeStatus],
        stored: Mapping[ShardKey, float | None],
    ) -> float:
        since = sight.blind_since
        assert since is not None
        if not sight.at_first:
            return since
        lost = [
            s
            for key, status in statuses.items()
            if key[0] == node and (s := shard_since(status, stored.get(key))) is not None
        ]
        return min(since, max(lost)) if lost else since


def shard_since(status: ComputeStatus, stored: float | None) -> float | None:
    """Since when, on this process's clock, the shard's verdict has stood without evidence;
    None while it is fresh."""
    if not status.stale or status.stale_since is None:
        return None
    lost_before = (status.time - status.stale_since).total_seconds()
    published = stored if stored is not None else status.time.timestamp()
    return published - max(lost_before, 0.0)
