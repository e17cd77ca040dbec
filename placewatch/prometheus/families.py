"""One node's metric families, built the same way by the worker (its own node, from the
tick's sample) and by the fleet exporter (every node it holds, at each scrape)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from placewatch.schemas import ComputeStatus, GpuSample, NodeSample, NodeTelemetry

from .exposition import Family, labels_text
from .metrics import (
    DRIVER_LABEL,
    GPU_LABELS,
    GPU_METRICS,
    GPU_PROBLEM,
    GPU_PROBLEM_HELP,
    GPU_PROBLEM_LABEL,
    GPU_PROBLEM_LABELS,
    NODE_AGE,
    NODE_METRICS,
    NODE_UP,
    POD_LABELS,
    SHARD_GPU_BYTES,
    SHARD_UNHEALTHY_GPU,
    SHARD_VERDICT,
    device,
    problem_kind,
)

Pod = tuple[str, str, str]
"""The container, namespace and pod a shard runs in, as dcgm-exporter's Kubernetes labels
name them (`container`, `namespace`, `pod`)."""

UP_INTERVALS = 3
"""A node is up while its last sample is younger than three of its intervals, as `placewatch
watch` and `placewatch health` judge it."""


class Families:
    """The families of a scrape, filled node by node (`add`), then yielded once."""

    def __init__(self) -> None:
        self.gpu = {m.name: Family(m.name, m.help, GPU_LABELS, m.kind) for m in GPU_METRICS}
        self.problems = Family(GPU_PROBLEM, GPU_PROBLEM_HELP, GPU_PROBLEM_LABELS)
        self.nodes = {
            name: Family(name, help_, tuple(labels))
            for name, (help_, labels) in NODE_METRICS.items()
        }

    def add(
        self,
        telemetry: NodeTelemetry,
        sample: NodeSample | None,
        age: float,
        pods: Mapping[str, Pod] | None = None,
    ) -> None:
        """One node: its telemetry `age` seconds old, its sample where it is known, and the
        pod of each shard that runs in one (`pods_of` its statuses)."""
        up = age <= UP_INTERVALS * telemetry.interval_s
        self.nodes[NODE_UP].add([telemetry.node], 1.0 if up else 0.0)
        self.nodes[NODE_AGE].add([telemetry.node], age)
        for shard, reading in sorted(telemetry.shards.items()):
            self.nodes[SHARD_VERDICT].add([telemetry.node, shard, reading.verdict], 1.0)
        if sample is not None:
            self._gpus(sample, pods or {})
            _shard_bytes(self.nodes[SHARD_GPU_BYTES], sample)
            _shard_unhealthy(self.nodes[SHARD_UNHEALTHY_GPU], sample)

    def __iter__(self) -> Iterator[Family]:
        yield from self.gpu.values()
        yield self.problems
        yield from self.nodes.values()

    def _gpus(self, s: NodeSample, pods: Mapping[str, Pod]) -> None:
        for g in s.gpus:
            names: tuple[str, ...] = GPU_LABELS
            labels = [str(g.index), g.uuid or "", g.bus_id or "", device(g), g.name or "", s.node]
            if g.driver_version:
                names, labels = (*names, DRIVER_LABEL), [*labels, g.driver_version]
            if (pod := _held_by(g, pods)) is not None:
                names, labels = (*names, *POD_LABELS), [*labels, *pod]
            text = labels_text(names, labels)  # once for every metric of this GPU
            for metric in GPU_METRICS:
                value = metric.value(g)
                if value is not None:
                    self.gpu[metric.name].rows.append((text, value))
            kinds = {problem_kind(p) for p in g.health.problems} if g.health is not None else ()
            for kind in sorted(kinds):
                problem = labels_text((*names, GPU_PROBLEM_LABEL), [*labels, kind])
                self.problems.rows.append((problem, 1.0))


def pods_of(statuses: Iterable[ComputeStatus]) -> dict[str, Pod]:
    """The pod of each shard whose status names one, by shard."""
    return {
        s.shard: (s.container_name or "", s.pod_namespace or "", s.pod_name)
        for s in statuses
        if s.pod_name
    }


def _held_by(g: GpuSample, pods: Mapping[str, Pod]) -> Pod | None:
    """The one pod whose shards hold every process on the GPU, as dcgm-exporter labels a GPU
    the kubelet gave one pod; None where the GPU is idle, shared, or held by a process of no
    pod's shard."""
    held = {pods.get(p.shard) if p.shard is not None else None for p in g.processes}
    return held.pop() if len(held) == 1 else None


def _shard_bytes(family: Family, s: NodeSample) -> None:
    """What each shard's processes hold on each GPU, summed; a process of no shard, or of
    unknown size, adds nothing."""
    for g in s.gpus:
        held: dict[str, int] = {}
        for p in g.processes:
            if p.shard is not None and p.used_bytes is not None:
                held[p.shard] = held.get(p.shard, 0) + p.used_bytes
        for shard, n in sorted(held.items()):
            family.add([s.node, shard, str(g.index)], float(n))


def _shard_unhealthy(family: Family, s: NodeSample) -> None:
    """Each shard with a process listed on an unhealthy GPU, once per GPU: as the shard pass
    fills ComputeStatus.unhealthy_gpus, from the same telemetry."""
    for g in s.gpus:
        if g.health is None or g.health.healthy:
            continue
        for shard in sorted({p.shard for p in g.processes if p.shard is not None}):
            family.add([s.node, shard, str(g.index)], 1.0)
