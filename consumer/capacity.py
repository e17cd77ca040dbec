"""What a gateway asks before it places a shard: which GPUs can take N bytes now, and which
nodes have gone quiet.

Answers come from each node's latest sample as a view holds it, so each carries its age: a
reading 1 s old says what a GPU has free now, one a minute old says what it had. Ages are
counted from when the view took the sample (its arrival, or when the server stored a copy
read from a stream), on the view's clock: a node whose clock is behind is not stale for it,
and one whose clock is ahead goes stale when it stops. A node
whose last sample is older than `max_age` is stale: its GPUs are not offered, and `stale()`
names it. By default that is three of the node's own intervals, as `placewatch watch` marks
a node STALE and the exporter's `placewatch_node_up` turns 0.

Free memory is what the GPU's tool reports free (`memory_free_bytes`; total minus used where
a tool gives no free figure). Foreign memory (used by nothing of the node's shards: another
tenant, a leaked process) is part of the used memory, so the free figure is already net of
it; each answer carries it too, since foreign memory does not come back when a shard moves.

A GPU that more than one live node reports (its uuid in two nodes' samples) is offered once:
it is one GPU, seen by two workers on one machine under two node names (a systemd unit and
a DaemonSet, a config copied from another machine), and `shared_gpus()` names them.

A GPU whose health says unhealthy (GpuHealth.healthy false: an XID that needs a reset, an
uncorrected ECC error, a row remapping pending or failed) is not offered, however much it has
free: what is placed there would fail or compute wrong until the GPU is reset. A GPU with no
health reading is offered: nothing says it is unfit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Protocol

import msgspec

from placewatch.schemas import GpuSample, NodeSample

from .held import Holdings

STALE_INTERVALS = 3


class GpuCandidate(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A GPU that can take the bytes asked for, as of its node's latest sample."""

    node: str
    gpu: int
    """Its index on the node (the vendor tool's PCI bus order)."""
    uuid: str | None
    name: str | None
    free_bytes: int
    foreign_bytes: int | None
    total_bytes: int | None
    age_s: float
    """Seconds since the view took the sample."""
    time: datetime
    """When the sample was taken, on the node's clock."""


class StaleNode(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A node whose latest sample is older than the limit asked for."""

    node: str
    age_s: float
    time: datetime
    limit_s: float
    """The limit it is past: `max_age`, or three of its intervals."""


class SharedGpu(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A GPU that more than one live node reports: two workers watch one machine under two
    names. Stop one of them, or give both the same node name (the lease then keeps one)."""

    uuid: str
    nodes: list[str]
    """The nodes that report it, sorted."""
    gpus: list[int]
    """Its index on each of those nodes, in the same order."""


def gpus_for(
    holdings: Holdings, nbytes: int, now: datetime, max_age: float | None = None
) -> list[GpuCandidate]:
    """Every healthy GPU of a live node with at least `nbytes` free, the most free first (then
    the least foreign, then by node and index), each GPU once however many nodes report it.
    A GPU whose free memory is unknown, or whose health says unhealthy, is left out."""
    found: list[GpuCandidate] = []
    for node, sample in _live(holdings, now, max_age):
        age = _age(holdings.nodes[node].seen, now)
        for g in sample.gpus:
            free = _free(g)
            if free is None or free < nbytes or (g.health is not None and not g.health.healthy):
                continue
            found.append(
                GpuCandidate(
                    node=node,
                    gpu=g.index,
                    uuid=g.uuid,
                    name=g.name,
                    free_bytes=free,
                    foreign_bytes=g.foreign_bytes,
                    total_bytes=g.memory_total_bytes,
                    age_s=age,
                    time=sample.time,
                )
            )
    found.sort(key=lambda c: (-c.free_bytes, c.foreign_bytes or 0, c.node, c.gpu))
    offered: set[str] = set()
    once = []
    for c in found:
        if c.uuid is None or c.uuid not in offered:
            once.append(c)
            if c.uuid is not None:
                offered.add(c.uuid)
    return once


def shared_gpus(holdings: Holdings, now: datetime, max_age: float | None = None) -> list[SharedGpu]:
    """Every GPU that more than one live node reports, sorted by its uuid."""
    return shared_among((node, sample.gpus) for node, sample in _live(holdings, now, max_age))


class Identified(Protocol):
    """A GPU as its index and uuid name it: a GpuSample, a GpuInfo."""

    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str | None: ...


def shared_among(nodes: Iterable[tuple[str, Iterable[Identified]]]) -> list[SharedGpu]:
    """Every GPU that more than one of these (node, its GPUs) reports, sorted by its uuid."""
    seen: dict[str, list[tuple[str, int]]] = {}
    for node, gpus in sorted(nodes, key=lambda pair: pair[0]):
        for g in gpus:
            if g.uuid is not None:
                seen.setdefault(g.uuid, []).append((node, g.index))
    return [
        SharedGpu(uuid=uuid, nodes=[n for n, _ in on], gpus=[i for _, i in on])
        for uuid, on in sorted((u, on) for u, on in seen.items() if len(on) > 1)
    ]


def _live(
    holdings: Holdings, now: datetime, max_age: float | None
) -> Iterator[tuple[str, NodeSample]]:
    """Each node whose latest sample is joined and younger than the limit, with it."""
    for node, held in holdings.nodes.items():
        sample = holdings.sample(node)
        if sample is None:
            continue
        if _age(held.seen, now) <= _limit(sample.interval_s, max_age):
            yield node, sample


def stale(holdings: Holdings, now: datetime, max_age: float | None = None) -> list[StaleNode]:
    """Every node whose latest telemetry is older than `max_age` seconds (None: three of its
    intervals), the oldest first."""
    found = []
    for node in holdings.nodes:
        t = holdings.telemetry(node)
        if t is None:
            continue
        age, limit = _age(holdings.nodes[node].seen, now), _limit(t.interval_s, max_age)
        if age > limit:
            found.append(StaleNode(node=node, age_s=age, time=t.time, limit_s=limit))
    found.sort(key=lambda s: (-s.age_s, s.node))
    return found


def _free(g: GpuSample) -> int | None:
    if g.memory_free_bytes is not None:
        return g.memory_free_bytes
    if g.memory_total_bytes is None or g.memory_used_bytes is None:
        return None
    return max(g.memory_total_bytes - g.memory_used_bytes, 0)


def _age(seen: float, now: datetime) -> float:
    """Seconds since the view took a sample at `seen` (seconds since the epoch)."""
    return max(now.timestamp() - seen, 0.0)


def _limit(interval_s: float, max_age: float | None) -> float:
    return STALE_INTERVALS * interval_s if max_age is None else max_age
