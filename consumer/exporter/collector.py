"""The fleet as Prometheus metric families, built from a view's holdings at each scrape.

Nothing is kept between scrapes: each one decodes the nodes' latest messages and writes
their families afresh, so a node that stopped sending is gone from the next scrape once its
last sample is older than the stale limit, and a shard whose verdict changed has one series
with the new verdict (Prometheus marks the old one stale at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from placewatch.consumer.fleet import Holdings
from placewatch.consumer.unreadable import REASONS
from placewatch.schemas import NodeSample, NodeTelemetry

from .metrics import (
    GPU_LABELS,
    GPU_METRICS,
    GPU_PROBLEM,
    GPU_PROBLEM_HELP,
    GPU_PROBLEM_LABELS,
    NODE_AGE,
    NODE_CLOCK_OFFSET,
    NODE_METRICS,
    NODE_UP,
    PARTITION_PROBLEM,
    PARTITION_PROBLEM_HELP,
    SHARD_GPU_BYTES,
    SHARD_UNHEALTHY_GPU,
    SHARD_VERDICT,
    UNREADABLE,
    UNREADABLE_HELP,
    GpuMetric,
    device,
    problem_kind,
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
    the epoch. `partition_problems`: the kinds of what the view's partition check found
    (consumer/mapping.py). `unreadable`: how many messages the view did not read, by reason
    (consumer/unreadable.py)."""

    def __init__(
        self,
        take: Callable[[], Holdings],
        *,
        node: str | None = None,
        stale_after: float | None = None,
        clock: Callable[[], float] = time.time,
        partition_problems: Callable[[], list[str]] = list,
        unreadable: Callable[[], dict[str, int]] = dict,
    ) -> None:
        self.take = take
        self.node = node
        self.stale_after = stale_after
        self.clock = clock
        self.partition_problems = partition_problems
        self.unreadable = unreadable

    def collect(self) -> Iterator[Metric]:
        holdings = self.take()
        now = self.clock()
        gpu = {m.name: _family(m) for m in GPU_METRICS}
        problems = GaugeMetricFamily(GPU_PROBLEM, GPU_PROBLEM_HELP, labels=GPU_PROBLEM_LABELS)
        nodes = {
            name: GaugeMetricFamily(name, help_, labels=labels)
            for name, (help_, labels) in NODE_METRICS.items()
        }
        names = [self.node] if self.node is not None else sorted(holdings.nodes)
        for name in names:
            telemetry = holdings.telemetry(name)
            if telemetry is None:
                continue
            held = holdings.nodes[name]
            age = max(now - held.seen, 0.0)
            if age > stale_limit(telemetry.interval_s, self.stale_after):
                continue
            _node(nodes, telemetry, age)
            nodes[NODE_CLOCK_OFFSET].add_metric([name], held.clock_offset_s)
            sample = holdings.sample(name)
            if sample is not None:
                _gpus(gpu, problems, sample)
                _shard_bytes(nodes[SHARD_GPU_BYTES], sample)
                _shard_unhealthy(nodes[SHARD_UNHEALTHY_GPU], sample)
        yield from gpu.values()
        yield problems
        yield from nodes.values()
        partition = GaugeMetricFamily(PARTITION_PROBLEM, PARTITION_PROBLEM_HELP, labels=["kind"])
        for kind in self.partition_problems():
            partition.add_metric([kind], 1.0)
        yield partition
        counted = CounterMetricFamily(UNREADABLE, UNREADABLE_HELP, labels=["reason"])
        for reason, count in sorted({**dict.fromkeys(REASONS, 0), **self.unreadable()}.items()):
            counted.add_metric([reason], count)
        yield counted


def _family(m: GpuMetric) -> GaugeMetricFamily | CounterMetricFamily:
    if m.kind == "counter":
        return CounterMetricFamily(m.name, m.help, labels=GPU_LABELS)
    return GaugeMetricFamily(m.name, m.help, labels=GPU_LABELS)


def _node(families: dict[str, GaugeMetricFamily], t: NodeTelemetry, age: float) -> None:
    up = age <= UP_INTERVALS * t.interval_s
    families[NODE_UP].add_metric([t.node], 1.0 if up else 0.0)
    families[NODE_AGE].add_metric([t.node], age)
    for shard, reading in sorted(t.shards.items()):
        families[SHARD_VERDICT].add_metric([t.node, shard, reading.verdict], 1.0)


def _gpus(
    families: dict[str, GaugeMetricFamily | CounterMetricFamily],
    problems: GaugeMetricFamily,
    s: NodeSample,
) -> None:
    for g in s.gpus:
        labels = [str(g.index), g.uuid or "", g.bus_id or "", device(g), g.name or "", s.node]
        for metric in GPU_METRICS:
            value = metric.value(g)
            if value is not None:
                families[metric.name].add_metric(labels, value)
        kinds = {problem_kind(p) for p in g.health.problems} if g.health is not None else set()
        for kind in sorted(kinds):
            problems.add_metric([*labels, kind], 1.0)


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


def _shard_unhealthy(family: GaugeMetricFamily, s: NodeSample) -> None:
    """Each shard with a process listed on an unhealthy GPU, once per GPU: as the shard pass
    fills ComputeStatus.unhealthy_gpus, from the same telemetry."""
    for g in s.gpus:
        if g.health is None or g.health.healthy:
            continue
        for shard in sorted({p.shard for p in g.processes if p.shard is not None}):
            family.add_metric([s.node, shard, str(g.index)], 1.0)
