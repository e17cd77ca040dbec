"""The fleet as Prometheus metric families, built from a view's holdings at each scrape.

Nothing is kept between scrapes: each one decodes the nodes' latest messages and writes
their families afresh, so a node that stopped sending is gone from the next scrape once its
last sample is older than the stale limit, and a shard whose verdict changed has one series
with the new verdict (Prometheus marks the old one stale at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from placewatch.consumer.fleet import Holdings
from placewatch.schemas import NodeSample, NodeTelemetry

from .metrics import (
    GPU_LABELS,
    GPU_METRICS,
    NODE_AGE,
    NODE_METRICS,
    NODE_UP,
    SHARD_GPU_BYTES,
    SHARD_VERDICT,
    device,
)
from .options import STALE_INTERVALS, STALE_MIN_S

UP_INTERVALS = 3
"""A node is up while its last sample is younger than three of its intervals, as `placewatch
watch` and `placewatch health` judge it."""


def stale_limit(interval_s: float, stale_after: float | None) -> float:
    """Seconds after which a node's last sample is too old to serve."""
    if stale_after is not None:
        return stale_after
    return max(STALE_INTERVALS * interval_s, STALE_MIN_S)


class FleetCollector(Collector):
    """Builds every family from `take()`, a view's holdings at this moment.

    `node`: serve that node only. `stale_after`: seconds after which a node's last sample
    leaves /metrics (None: stale_limit's default). `clock`: the time now, in seconds since
    the epoch."""

    def __init__(
        self,
        take: Callable[[], Holdings],
        *,
        node: str | None = None,
        stale_after: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.take = take
        self.node = node
        self.stale_after = stale_after
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        holdings = self.take()
        now = self.clock()
        gpu = {m.name: GaugeMetricFamily(m.name, m.help, labels=GPU_LABELS) for m in GPU_METRICS}
        nodes = {
            name: GaugeMetricFamily(name, help_, labels=labels)
            for name, (help_, labels) in NODE_METRICS.items()
        }
        names = [self.node] if self.node is not None else sorted(holdings.nodes)
        for name in names:
            telemetry = holdings.telemetry(name)
            if telemetry is None:
                continue
            age = max(now - telemetry.time.timestamp(), 0.0)
            if age > stale_limit(telemetry.interval_s, self.stale_after):
                continue
            _node(nodes, telemetry, age)
            sample = holdings.sample(name)
            if sample is not None:
                _gpus(gpu, sample)
                _shard_bytes(nodes[SHARD_GPU_BYTES], sample)
        yield from gpu.values()
        yield from nodes.values()


def _node(families: dict[str, GaugeMetricFamily], t: NodeTelemetry, age: float) -> None:
    up = age <= UP_INTERVALS * t.interval_s
    families[NODE_UP].add_metric([t.node], 1.0 if up else 0.0)
    families[NODE_AGE].add_metric([t.node], age)
    for shard, reading in sorted(t.shards.items()):
        families[SHARD_VERDICT].add_metric([t.node, shard, reading.verdict], 1.0)


def _gpus(families: dict[str, GaugeMetricFamily], s: NodeSample) -> None:
    for g in s.gpus:
        labels = [str(g.index), g.uuid or "", g.bus_id or "", device(g), g.name or "", s.node]
        for metric in GPU_METRICS:
            value = metric.value(g)
            if value is not None:
                families[metric.name].add_metric(labels, value)


def _shard_bytes(family: GaugeMetricFamily, s: NodeSample) -> None:
    """What each shard's processes hold on each GPU, summed; a process of no shard, or of
    unknown size, adds nothing."""
    for g in s.gpus:
        held: dict[str, int] = {}
        for p in g.processes:
            if p.shard is not None and p.used_bytes is not None:
                held[p.shard] = held.get(p.shard, 0) + p.used_bytes
        for shard, n in sorted(held.items()):
            family.add_metric([s.node, shard, str(g.index)], float(n))
