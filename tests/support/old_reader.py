"""The wire Structs as a reader of the first release of schema 2's messages has them: a
frozen copy, never to be edited to follow schemas/.

A gateway built then decodes today's messages with these; the contract promises it can
(fields are added with defaults, never renamed or removed; unknown fields are ignored).
They are schemas/messages.py as the lean telemetry made it (NodeInventory apart, readings in
NodeTelemetry: the first shape a schema-2 reader of today's telemetry knew; a reader of
before it is refused by name, codec.OLDEST_READ), and NodeForgotten as it was first
published. Every field added since (GPU health, clocks, per-process activity, driver
version, `stale_since`, pod names, `engine`, ...) is left out, as that reader never heard of
it. What it knew it checks as strictly as it did: a Literal value it does not know (a new
vendor, backend or verdict) is an error naming the field, never a silent misread.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Pid = Annotated[int, msgspec.Meta(ge=1, le=4_194_304)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=1023)]
ShardId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Time = datetime

Vendor = Literal["nvidia", "amd"]
Activity = Literal["busy", "power"]
Backend = Literal["CUDA", "ROCm", "CPU", "unknown"]
Verdict = Literal[
    "starting", "gpu", "partial", "cpu_fallback", "misplaced", "cpu", "unknown", "gone"
]
FallbackState = Literal["firing", "resolved"]


class MigInstance(msgspec.Struct, frozen=True, kw_only=True):
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    uuid: str | None = None
    profile: str | None = None
    memory_total_bytes: NonNegative | None = None
    memory_used_bytes: NonNegative | None = None


class SourceStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    ok: bool
    latency_ms: float | None = None
    error: str | None = None
    vendor: Vendor | None = None
    degraded: bool = False


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    index: NonNegative
    vendor: Vendor
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None
    memory_total_bytes: NonNegative | None = None
    power_cap_w: float | None = None
    mig_enabled: bool | None = None
    mig: list[MigInstance] = msgspec.field(default_factory=list)
    temperature_sensor: str | None = None


class HostInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    cpu_count: int | None = None
    memory_total_bytes: NonNegative | None = None


class ProcessInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str | None = None
    shard: str | None = None


class NodeInventory(msgspec.Struct, frozen=True, kw_only=True):
    schema: int = 2
    node: str
    session: str
    time: Time
    id: str
    gpus: list[GpuInfo] = msgspec.field(default_factory=list)
    host: HostInfo | None = None
    processes: dict[int, ProcessInfo] = msgspec.field(default_factory=dict)
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)


class GpuReading(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    index: NonNegative
    utilization_pct: Percent | None = None
    activity: Activity | None = None
    memory_used_bytes: NonNegative | None = None
    memory_free_bytes: NonNegative | None = None
    foreign_bytes: NonNegative | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    processes: dict[int, NonNegative | None] = msgspec.field(default_factory=dict)
    mig_used_bytes: list[NonNegative | None] = msgspec.field(default_factory=list)


class HostReading(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    cpu_pct: Percent | None = None
    memory_available_bytes: NonNegative | None = None
    load_1m: float | None = None


class ShardReading(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    verdict: Verdict


class NodeTelemetry(msgspec.Struct, frozen=True, kw_only=True):
    schema: int = 2
    node: str
    session: str
    seq: NonNegative
    time: Time
    interval_s: float
    inventory: str
    gpus: list[GpuReading] = msgspec.field(default_factory=list)
    host: HostReading | None = None
    shards: dict[str, ShardReading] = msgspec.field(default_factory=dict)
    sources: list[SourceStatus] = msgspec.field(default_factory=list)
    dropped: NonNegative = 0
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)


class DeviceUse(msgspec.Struct, frozen=True, kw_only=True):
    index: NonNegative
    uuid: str | None = None
    used_bytes: NonNegative = 0


class ComputeStatus(msgspec.Struct, frozen=True, kw_only=True):
    schema: int = 2
    node: str
    shard: str
    session: str
    time: Time
    pid: int | None = None
    placed_gpus: list[int] = msgspec.field(default_factory=list)
    backend: Backend = "unknown"
    devices: list[DeviceUse] = msgspec.field(default_factory=list)
    layers_offloaded: int | None = None
    layers_total: int | None = None
    verdict: Verdict = "unknown"
    reason: str = ""
    evidence: list[str] = msgspec.field(default_factory=list)
    stale: bool = False
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)
    container_id: str | None = None
    pod_uid: str | None = None


class FallbackEvent(msgspec.Struct, frozen=True, kw_only=True):
    schema: int = 2
    state: FallbackState
    status: ComputeStatus


class PlacementSpec(msgspec.Struct, frozen=True, kw_only=True):
    id: ShardId
    gpus: Annotated[list[GpuIndex], msgspec.Meta(max_length=64)] = msgspec.field(
        default_factory=list
    )
    pid: Pid | None = None
    match: Annotated[str, msgspec.Meta(max_length=1024)] | None = None
    health_url: Annotated[str, msgspec.Meta(max_length=2048, pattern="^https?://")] | None = None
    log_path: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    min_gpu_bytes: Annotated[int, msgspec.Meta(ge=0, le=1 << 50)] | None = None
    engine: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class NodeLease(msgspec.Struct, frozen=True, kw_only=True):
    schema: int = 2
    node: str
    session: str
    host: str
    pid: Pid
    started: Time
    interval_s: Annotated[float, msgspec.Meta(gt=0, le=86_400.0)]


class NodeForgotten(msgspec.Struct, frozen=True, kw_only=True):
    schema: int = 2
    node: str
    time: Time
    reason: str


OLD_TYPES: dict[str, type[msgspec.Struct]] = {
    t.__name__: t
    for t in (
        NodeTelemetry,
        NodeInventory,
        ComputeStatus,
        FallbackEvent,
        PlacementSpec,
        NodeLease,
        NodeForgotten,
    )
}
"""The old reader's type for each message type, by its Placewatch-Type name."""
