"""One node's metric families, built the same way by the worker (its own node, from the
tick's sample) and by the fleet exporter (every node it holds, at each scrape)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime

from placewatch.schemas import (
    ComputeStatus,
    GpuSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    lean,
)
from placewatch.schemas.evidence import evidence_age_s, gpu_sources, node_blind

from .exposition import Family, labels_text
from .metrics import (
    DRIVER_LABEL,
    GPU_LABELS,
    GPU_METRICS,
    GPU_PROBLEM,
    GPU_PROBLEM_HELP,
    GPU_PROBLEM_LABEL,
    GPU_PROBLEM_LABELS,
    GPU_SOURCE_UP,
    GPU_STALE,
    GPU_STALE_HELP,
    NODE_AGE,
    NODE_BLIND,
    NODE_METRICS,
    NODE_UP,
    POD_LABELS,
    SHARD_EVIDENCE_AGE,
    SHARD_GPU_BYTES,
    SHARD_STALE,
    SHARD_UNHEALTHY_GPU,
    SHARD_VERDICT,
    device,
    problem_kind,
)
from .xpum import XPUM_NAMES, XpumMetric

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
        self.stale = Family(GPU_STALE, GPU_STALE_HELP, GPU_LABELS)
        self.xpum = {m.name: Family(m.name, m.help, GPU_LABELS) for m in XPUM_NAMES.values()}
        """Intel GPUs' readings under xpumanager's names (xpum.py); served where one has rows."""
        self.nodes = {
            name: Family(name, help_, tuple(labels))
            for name, (help_, labels) in NODE_METRICS.items()
        }

    def add(
        self,
        telemetry: NodeTelemetry,
        sample: NodeSample | None,
        age: float,
        *,
        statuses: Sequence[ComputeStatus] = (),
        inventory: NodeInventory | None = None,
        now: datetime | None = None,
    ) -> None:
        """One node: its telemetry `age` seconds old, its sample where it is known, its
        shards' latest `statuses` (their pods, staleness, and the GPUs each holds), the
        `inventory` the telemetry names (the GPUs no tool read this tick), and `now` on the
        node's clock (its telemetry's time when not given), for evidence ages."""
        node = telemetry.node
        up = age <= UP_INTERVALS * telemetry.interval_s
        self.nodes[NODE_UP].add([node], 1.0 if up else 0.0)
        self.nodes[NODE_AGE].add([node], age)
        self._shards(telemetry, statuses, now or telemetry.time)
        unread = [] if inventory is None else lean.unread(inventory, telemetry)
        self._tools(telemetry, gpus_known=bool(unread))
        pods = pods_of(statuses)
        if sample is not None:
            for g in sample.gpus:
                self._gpu(g, node, _held_by(g, pods), stale=False)
            _shard_bytes(self.nodes[SHARD_GPU_BYTES], sample)
            _shard_unhealthy(self.nodes[SHARD_UNHEALTHY_GPU], sample)
        holders = _holders(statuses)
        for g in unread:
            shards = holders.get(g.index, set())
            self._gpu(g, node, _one_pod(shards, pods), stale=True)
            if g.health is not None and not g.health.healthy:
                for shard in sorted(shards):
                    self.nodes[SHARD_UNHEALTHY_GPU].add([node, shard, str(g.index)], 1.0)

    def _shards(
        self, telemetry: NodeTelemetry, statuses: Sequence[ComputeStatus], now: datetime
    ) -> None:
        """Each shard's verdict, and, where its status is held, its staleness and evidence
        age (none where it is not: unknown is no sample, never 0)."""
        node = telemetry.node
        by_shard = {s.shard: s for s in statuses}
        for shard, reading in sorted(telemetry.shards.items()):
            self.nodes[SHARD_VERDICT].add([node, shard, reading.verdict], 1.0)
            if (status := by_shard.get(shard)) is not None:
                self.nodes[SHARD_STALE].add([node, shard], 1.0 if status.stale else 0.0)
                self.nodes[SHARD_EVIDENCE_AGE].add([node, shard], evidence_age_s(status, now))

    def _tools(self, telemetry: NodeTelemetry, *, gpus_known: bool) -> None:
        """Each GPU tool up or down, and whether the node is blind (schemas/evidence.py)."""
        node = telemetry.node
        for tool in gpu_sources(telemetry.sources):
            answered = 1.0 if tool.ok else 0.0
            self.nodes[GPU_SOURCE_UP].add([node, tool.name, tool.vendor or ""], answered)
        blind = node_blind(telemetry, gpus_known)
        self.nodes[NODE_BLIND].add([node], 1.0 if blind else 0.0)

    def order(self) -> list[str]:
        """The name of every family it may give, in the order it gives them."""
        every = [*self.gpu.values(), *self.xpum.values(), self.problems, self.stale]
        return [f.name for f in (*every, *self.nodes.values())]

    def __iter__(self) -> Iterator[Family]:
        yield from self.gpu.values()
        yield from (f for f in self.xpum.values() if f.rows)
        yield self.problems
        yield self.stale
        yield from self.nodes.values()

    def _gpu(self, g: GpuSample, node: str, pod: Pod | None, *, stale: bool) -> None:
        """One GPU's series: its readings and health, whether it was read, its problems."""
        names: tuple[str, ...] = GPU_LABELS
        labels = [str(g.index), g.uuid or "", g.bus_id or "", device(g), g.name or "", node]
        if g.driver_version:
            names, labels = (*names, DRIVER_LABEL), [*labels, g.driver_version]
        if pod is not None:
            names, labels = (*names, *POD_LABELS), [*labels, *pod]
        text = labels_text(names, labels)  # once for every metric of this GPU
        for metric in GPU_METRICS:
            if g.vendor == "intel" and (xpum := XPUM_NAMES.get(metric.name)) is not None:
                self._xpum(xpum, g, metric.field, names, labels)
            elif (value := metric.value(g)) is not None:
                self.gpu[metric.name].rows.append((text, value))
        self.stale.rows.append((text, 1.0 if stale else 0.0))
        kinds = {problem_kind(p) for p in g.health.problems} if g.health is not None else ()
        for kind in sorted(kinds):
            problem = labels_text((*names, GPU_PROBLEM_LABEL), [*labels, kind])
            self.problems.rows.append((problem, 1.0))

    def _xpum(
        self, xpum: XpumMetric, g: GpuSample, field: str, names: Sequence[str], labels: list[str]
    ) -> None:
        """An Intel GPU's reading under xpumanager's name, with its extra labels last."""
        value = xpum.value(g, field)
        if value is not None:
            extra_names = tuple(name for name, _ in xpum.labels)
            text = labels_text((*names, *extra_names), [*labels, *(v for _, v in xpum.labels)])
            self.xpum[xpum.name].rows.append((text, value))


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


def _holders(statuses: Iterable[ComputeStatus]) -> dict[int, set[str]]:
    """The shards each GPU index lists among a shard's devices: while no tool reads the
    GPUs, a stale status keeps the devices its processes held memory on as last read."""
    held: dict[int, set[str]] = {}
    for s in statuses:
        for d in s.devices:
            held.setdefault(d.index, set()).add(s.shard)
    return held


def _one_pod(shards: Iterable[str], pods: Mapping[str, Pod]) -> Pod | None:
    """As _held_by, for a GPU no tool read: the one pod of the shards its statuses put on it."""
    held = {pods.get(shard) for shard in shards}
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
