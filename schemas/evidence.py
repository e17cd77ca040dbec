"""What a node's messages say of evidence lost, read one way by every reader: which of its
sources are GPU tools, when a node is blind (none of its GPU tools answers), and how long a
shard's verdict has stood without evidence (ComputeStatus.stale_since).

The exporter and a node's /metrics serve these as series, `placewatch alerts` posts the
blindness alerts from them, and `placewatch watch` lists them; each reads them here, so that
the paths agree on when a node or a shard is blind (docs/shards.md, Blindness).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from .messages import ComputeStatus, NodeTelemetry, SourceStatus

BLIND_AFTER_S = 300.0
"""How long a shard's evidence, or every GPU tool of a node, may be lost before it is an
alert of its own: longer than a driver reload or a tool's restart (tens of seconds), short
enough that a node blind for good is heard of within minutes."""


def gpu_sources(sources: Iterable[SourceStatus]) -> list[SourceStatus]:
    """The sources that are GPU tools: each names its vendor, where the node's other sources
    (placements, the shards file, a trimmed telemetry) name none."""
    return [s for s in sources if s.vendor is not None]


def node_blind(telemetry: NodeTelemetry, gpus_known: bool = False) -> bool:
    """Whether the node was blind at this telemetry: it read no GPU and none of its GPU tools
    answered, on a node that has GPUs (`gpus_known`: its inventory lists some) or a GPU tool
    that ran and failed (one with a latency). A node with no GPU tool installed and no GPU
    known has nothing to be blind to: it lists each tool it looked for as not found, and
    none has a latency."""
    tools = gpu_sources(telemetry.sources)
    if telemetry.gpus or not tools or any(s.ok for s in tools):
        return False
    return gpus_known or any(s.latency_ms is not None for s in tools)


def evidence_age_s(status: ComputeStatus, now: datetime) -> float:
    """Seconds since the evidence of the shard's verdict was last had, by `now` on the
    node's clock (the status's times are the node's): 0 while its verdict is fresh."""
    if not status.stale or status.stale_since is None:
        return 0.0
    return max((now - status.stale_since).total_seconds(), 0.0)
