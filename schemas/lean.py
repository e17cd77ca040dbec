"""A NodeSample split into what stays (NodeInventory) and what changes (NodeTelemetry), and
joined back.

Most of a sample does not change between ticks: a GPU's uuid, name, bus id and totals, its
MIG layout, the host's totals, the name and shard of each GPU process. Sent every tick, that
was two thirds of a busy node's telemetry (11.5 KB of JSON for 8 GPUs, 64 processes and 16
shards). So it travels in an inventory, published when it changes and kept as the last value
per node, and each tick's telemetry carries readings and the inventory's id: 3.7 KB. Why a
shard has its verdict is in its ComputeStatus, published when the verdict changes.

`split` and `join` are exact inverses for what a NodeSample holds, except each shard's pid,
reason and request count, which `join` takes from the shards' ComputeStatus where it is
given them, and what each GPU process ran (GpuProcess.sm_pct, .mem_pct), which stays out of
the telemetry: 64 processes' activity would add 1.7 KB of JSON a tick to 3.5. Each shard's
SM use travels instead (ShardReading.sm_pct: 16 shards add 0.2 KB).

A GPU's health (GpuHealth) is mostly counts that stay at zero for months (XIDs, ECC errors,
retired pages, remapped rows, PCIe replays) and its PCIe link: it travels in the inventory,
and a change to it publishes a new one. Sent every tick, a healthy H200 node's health was
2.6 KB of zeros in JSON. The telemetry carries what changes by the tick: the clocks, memory
utilization, energy and fan, the clock events, and the problems of an unhealthy GPU (none
while it is healthy), so that a reader of the telemetry alone still sees a GPU go bad.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from .evidence import gpu_sources
from .health import GpuHealth
from .messages import (
    GPU_READINGS,
    ComputeStatus,
    GpuInfo,
    GpuProcess,
    GpuReading,
    GpuSample,
    HostInfo,
    HostReading,
    HostSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    ProcessInfo,
    ShardBrief,
    ShardReading,
)

ID_BYTES = 6
"""An inventory id is this many bytes of a BLAKE2b digest, in hex: a node has a handful of
inventories in its life, and a reader only compares a telemetry's id with the latest."""

_digest = msgspec.msgpack.Encoder()


def split(
    sample: NodeSample, last: NodeInventory | None = None
) -> tuple[NodeInventory, NodeTelemetry]:
    """The sample as the node's inventory and this tick's telemetry, which names it. `last`:
    the inventory split from the sample before, whose id stands while its content does (a
    comparison, where the id is a digest of the whole content).

    A tick on which no GPU tool answered reads no GPU, but the GPUs are there: the inventory
    keeps `last`'s GPUs and processes, their health as last read, until a tool answers
    again, and the telemetry carries no reading of them. A reader tells a GPU not read this
    tick by its absence from the telemetry (`unread`); an unhealthy GPU stays unhealthy
    through a tool's outage."""
    gpus = [_info(g) for g in sample.gpus]
    host = None if sample.host is None else _host_info(sample.host)
    processes = {
        p.pid: ProcessInfo(name=p.name, shard=p.shard) for g in sample.gpus for p in g.processes
    }
    if last is not None and not gpus and not any(s.ok for s in gpu_sources(sample.sources)):
        gpus, processes = last.gpus, last.processes  # no GPU tool answered: what was known
    if last is not None and (gpus, host, processes) == (last.gpus, last.host, last.processes):
        inventory_id = last.id
    else:
        inventory_id = identify(gpus, host, processes)
    inventory = NodeInventory(
        node=sample.node,
        session=sample.session,
        time=sample.time,
        id=inventory_id,
        gpus=gpus,
        host=host,
        processes=processes,
    )
    telemetry = NodeTelemetry(
        node=sample.node,
        session=sample.session,
        seq=sample.seq,
        time=sample.time,
        interval_s=sample.interval_s,
        inventory=inventory_id,
        gpus=[_reading(g) for g in sample.gpus],
        host=None if sample.host is None else _host_reading(sample.host),
        shards={b.shard: ShardReading(verdict=b.verdict, sm_pct=b.sm_pct) for b in sample.shards},
        sources=sample.sources,
        dropped=sample.dropped,
        omitted=sample.omitted,
    )
    return inventory, telemetry


def identify(gpus: list[GpuInfo], host: HostInfo | None, processes: dict[int, ProcessInfo]) -> str:
    """The id of an inventory's content: equal content, equal id, whoever computes it."""
    content = _digest.encode((gpus, host, sorted(processes.items())))
    return hashlib.blake2b(content, digest_size=ID_BYTES).hexdigest()


class InventoryMismatch(ValueError):
    """The telemetry names another inventory than the one given to join it with."""


def join(
    inventory: NodeInventory,
    telemetry: NodeTelemetry,
    statuses: Mapping[str, ComputeStatus] | None = None,
) -> NodeSample:
    """The sample the node split into these two; each shard's pid and reason from its
    ComputeStatus in `statuses` (by shard name) where there is one.

    Raises InventoryMismatch when the telemetry names another inventory (a reader holding an
    older one waits for the newer, or asks the node for it)."""
    if telemetry.inventory != inventory.id:
        raise InventoryMismatch(
            f"telemetry of {telemetry.node} seq {telemetry.seq} is of inventory "
            f"{telemetry.inventory!r}, not {inventory.id!r}"
        )
    infos = {g.index: g for g in inventory.gpus}
    statuses = statuses or {}
    shards = []
    for shard, reading in telemetry.shards.items():
        status = statuses.get(shard)
        pid, reason, requests = (
            (None, "", None) if status is None else (status.pid, status.reason, status.requests)
        )
        shards.append(
            ShardBrief(
                shard=shard,
                verdict=reading.verdict,
                pid=pid,
                reason=reason,
                sm_pct=reading.sm_pct,
                requests=requests,
            )
        )
    return NodeSample(
        node=telemetry.node,
        session=telemetry.session,
        seq=telemetry.seq,
        time=telemetry.time,
        interval_s=telemetry.interval_s,
        gpus=[_gpu(infos.get(r.index), r, inventory.processes) for r in telemetry.gpus],
        host=_host(inventory.host, telemetry.host),
        shards=shards,
        sources=telemetry.sources,
        dropped=telemetry.dropped,
        omitted={**inventory.omitted, **telemetry.omitted},
        inventory=inventory.id,
    )


def unread(inventory: NodeInventory, telemetry: NodeTelemetry) -> list[GpuSample]:
    """The GPUs the inventory lists that the telemetry has no reading of (its node's GPU
    tools did not answer): what each is and its health as last read, without a reading; none
    where the telemetry names another inventory."""
    if telemetry.inventory != inventory.id:
        return []
    read = {r.index for r in telemetry.gpus}
    return [
        GpuSample(
            index=info.index,
            mig=info.mig,
            health=info.health,
            **{f: getattr(info, f) for f in _GPU_INFO},
        )
        for info in inventory.gpus
        if info.index not in read
    ]


def _number(value: float | None) -> float | None:
    """A whole number as an int: `40` is two bytes of JSON and one of msgpack, `40.0` four and
    nine. A reader decoding it as a float gets 40.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _numbers(whole: msgspec.Struct, fields: tuple[str, ...]) -> dict[str, Any]:
    """The readings `fields` of `whole`, each whole number as an int (_number)."""
    return {f: _number(getattr(whole, f)) for f in fields}


def _copied(
    part: type[msgspec.Struct], whole: type[msgspec.Struct], by_hand: set[str]
) -> tuple[str, ...]:
    """The fields a part (GpuInfo, HostInfo, HostReading) takes as they are from the whole
    (GpuSample, HostSample): each of its fields but those made by hand. A field the part has
    and the whole has not is a mistake in the Structs, said at import."""
    fields = tuple(f for f in part.__struct_fields__ if f not in by_hand)
    if stray := [f for f in fields if f not in whole.__struct_fields__]:
        raise TypeError(f"{part.__name__} has {stray}, which {whole.__name__} lacks")
    return fields


_GPU_INFO = _copied(GpuInfo, GpuSample, {"index", "mig", "health"})
_HOST_INFO = _copied(HostInfo, HostSample, set())
_HOST_READING = _copied(HostReading, HostSample, set())
BY_HAND = frozenset({"index", "processes", "mig", "health"})
"""GpuSample's fields that split and join make by hand: the key, the processes (their
memory a reading, their names and shards inventory), the MIG instances (their layout
inventory, their memory a reading), the health (its counts inventory, its clock events and
problems readings). Every other field of GpuSample is a reading (GPU_READINGS: GpuSample and
GpuReading both take them from GpuReadingFields) or in GpuInfo, copied as it is."""


def _info(g: GpuSample) -> GpuInfo:
    return GpuInfo(
        index=g.index,
        mig=[msgspec.structs.replace(m, memory_used_bytes=None) for m in g.mig],
        health=None if g.health is None else msgspec.structs.replace(g.health, clock_events=[]),
        **{f: getattr(g, f) for f in _GPU_INFO},
    )


def _reading(g: GpuSample) -> GpuReading:
    processes: dict[int, int | None] = {}
    for p in g.processes:  # one pid twice on a GPU (in two MIG instances): its sum
        if p.pid in processes:
            held, more = processes[p.pid], p.used_bytes
            processes[p.pid] = None if held is None or more is None else held + more
        else:
            processes[p.pid] = p.used_bytes
    return GpuReading(
        index=g.index,
        processes=processes,
        mig_used_bytes=[m.memory_used_bytes for m in g.mig],
        clock_events=[] if g.health is None else g.health.clock_events,
        problems=[] if g.health is None else g.health.problems,
        **_numbers(g, GPU_READINGS),
    )


def _gpu(info: GpuInfo | None, r: GpuReading, processes: Mapping[int, ProcessInfo]) -> GpuSample:
    unknown = ProcessInfo()
    listed = [
        GpuProcess(
            pid=pid,
            used_bytes=used,
            shard=processes.get(pid, unknown).shard,
            name=processes.get(pid, unknown).name,
        )
        for pid, used in r.processes.items()
    ]
    values = {f: getattr(r, f) for f in GPU_READINGS}
    if info is not None:  # without it, what the inventory holds takes GpuSample's defaults
        values.update((f, getattr(info, f)) for f in _GPU_INFO)
    mig = [] if info is None else info.mig
    used = r.mig_used_bytes
    return GpuSample(
        index=r.index,
        processes=listed,
        mig=[
            msgspec.structs.replace(m, memory_used_bytes=used[i] if i < len(used) else None)
            for i, m in enumerate(mig)
        ],
        health=_health(info, r),
        **values,
    )


def _health(info: GpuInfo | None, r: GpuReading) -> GpuHealth | None:
    """The GPU's health as its inventory has it, with this tick's clock events and problems
    (the problems the telemetry names are the ones of this tick)."""
    if info is None or info.health is None:
        return None
    return msgspec.structs.replace(
        info.health,
        clock_events=r.clock_events,
        problems=r.problems,
        healthy=not r.problems,
    )


def _host_info(h: HostSample) -> HostInfo:
    return HostInfo(**{f: getattr(h, f) for f in _HOST_INFO})


def _host_reading(h: HostSample) -> HostReading:
    return HostReading(**_numbers(h, _HOST_READING))


def _host(info: HostInfo | None, reading: HostReading | None) -> HostSample | None:
    if info is None and reading is None:
        return None
    values = {} if reading is None else {f: getattr(reading, f) for f in _HOST_READING}
    if info is not None:
        values.update((f, getattr(info, f)) for f in _HOST_INFO)
    return HostSample(**values)
