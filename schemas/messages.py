"""The messages placewatch publishes and reads, as msgspec Structs.

These names are the product's API: fields are added with defaults, never renamed or
removed, so a gateway built against an older placewatch keeps decoding newer messages
(unknown fields are ignored on decode). Sizes are bytes, times are UTC and travel as RFC
3339 strings, and a reading a tool could not give is None, never 0.

Every Struct is `gc=False`: a message never refers back to itself, so the collector has no
cycle to find in it; a gateway holding 5,000 samples of 8 GPUs had each full collection take
167 ms without it, 86 ms with (bench/fan_in.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, cast

import msgspec

from .endpoint import Endpoint
from .health import GpuHealth
from .values import NonNegative, Percent, Time, WholePercent

ACTIVITY_WINDOW_S = 30.0
"""The window ComputeStatus.sm_pct and .requests are taken over, and over which a shard
serving requests with no GPU activity is judged to compute on the CPU."""

SCHEMA_VERSION = 2
"""Bumped only when a change would mislead an old reader; sent as Placewatch-Schema; changes
in docs/subjects.md (2: names one-to-one, telemetry split into inventory and readings)."""

Vendor = Literal["nvidia", "amd", "intel"]
Activity = Literal["busy", "power"]
Backend = Literal["CUDA", "ROCm", "SYCL", "Vulkan", "CPU", "unknown"]
Verdict = Literal[
    "starting", "gpu", "partial", "cpu_fallback", "misplaced", "cpu", "unknown", "gone"
]
FallbackState = Literal["firing", "resolved"]

FALLBACK_VERDICTS: frozenset[Verdict] = frozenset({"partial", "cpu_fallback", "misplaced"})
"""The verdicts of a shard placed on GPUs that does not compute (only) on them: entering one
fires a FallbackEvent, leaving it resolves the event."""

PID_MAX = 4_194_304
"""The largest process id Linux hands out (PID_MAX_LIMIT on 64-bit kernels)."""
Pid = Annotated[int, msgspec.Meta(ge=1, le=PID_MAX)]

S = TypeVar("S", bound=msgspec.Struct)


def _placed(after: str, fields: tuple[str, ...]) -> Callable[[type[S]], type[S]]:
    """The Struct made again with its own `fields` right after its field `after`, its name,
    docstring and configuration kept. A subclass's fields follow its base's, and schema 2
    put GpuReading's processes and MIG memory after its power draw: its JSON keeps the
    order it had, byte for byte (a reader may diff or hash it). The Struct made is not a
    subclass of the base; nothing asks isinstance of GpuReadingFields."""

    def place(cls: type[S]) -> type[S]:
        declared = msgspec.structs.fields(cls)
        by_name = {f.name: f for f in declared}
        kept = [f for f in declared if f.name not in fields]
        moved = [by_name[name] for name in fields]
        at = [f.name for f in kept].index(after) + 1
        c = cls.__struct_config__
        made = msgspec.defstruct(
            cls.__name__,
            [_field(f) for f in [*kept[:at], *moved, *kept[at:]]],
            module=cls.__module__,
            namespace={"__doc__": cls.__doc__},
            kw_only=True,
            **{name: getattr(c, name) for name in _CONFIG},
        )
        return cast("type[S]", made)

    return place


_CONFIG = (
    "frozen", "eq", "order", "array_like", "gc", "omit_defaults", "repr_omit_defaults",
    "forbid_unknown_fields", "weakref", "dict", "cache_hash", "tag", "tag_field",
)  # fmt: skip
"""The Struct options a Struct made again by _placed keeps (kw_only is every message's)."""


def _field(f: msgspec.structs.FieldInfo) -> tuple[str, Any] | tuple[str, Any, Any]:
    """A field as msgspec.defstruct takes it: name, type and, where it has one, default."""
    if f.default_factory is not msgspec.NODEFAULT:
        return (f.name, f.type, msgspec.field(default_factory=f.default_factory))
    if f.default is not msgspec.NODEFAULT:
        return (f.name, f.type, f.default)
    return (f.name, f.type)


class GpuProcess(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A process holding memory on a GPU, as the GPU's driver lists it."""

    pid: int
    used_bytes: NonNegative | None = None
    shard: str | None = None
    name: str | None = None
    sm_pct: WholePercent | None = None
    """The share of time the process ran kernels on the GPU's SMs since the last read, in
    whole percent (NVML's per-process utilization samples, `nvidia-smi pmon`'s `sm`; on AMD,
    amd-smi's gfx engine time where it is above 0). Null where the tool does not give it, and
    on ticks where no shard placed on GPUs needs it."""
    mem_pct: WholePercent | None = None
    """The share of time the GPU's memory controller served the process (NVML, pmon `mem`)."""


class MigInstance(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One MIG instance of a MIG-enabled NVIDIA GPU (A100, H100 and later)."""

    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    uuid: str | None = None
    profile: str | None = None
    """The instance's profile name where the tool gives it ("1g.10gb")."""
    memory_total_bytes: NonNegative | None = None
    memory_used_bytes: NonNegative | None = None


class GpuReadingFields(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A GPU's readings at one tick, each declared once, here: GpuSample (what a source
    reads) and GpuReading (what the telemetry carries) both have them, and split and join
    copy them by these names. A new reading is a field here, with a default, and its
    parsers: it reaches the sample, the telemetry and the joined sample with nothing else
    to write. What a GPU is (its name, totals, driver) is in GpuSample and GpuInfo."""

    index: NonNegative
    """Physical: the vendor tool's (PCI bus) order, as in the inventory's GpuInfo."""
    utilization_pct: Percent | None = None
    activity: Activity | None = None
    """Which reading `utilization_pct` is: "busy" (the driver's busy time) or "power" (the
    power draw as a share of the cap, where the busy figure says nothing)."""
    memory_used_bytes: NonNegative | None = None
    memory_free_bytes: NonNegative | None = None
    foreign_bytes: NonNegative | None = None
    """Memory held by processes of no shard."""
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: NonNegative | None = None
    """The SM clock now, in MHz."""
    memory_clock_mhz: NonNegative | None = None
    """The memory clock now, in MHz."""
    memory_util_pct: Percent | None = None
    """The share of time the memory controller was busy (DCGM's "mem copy utilization")."""
    energy_j: float | None = None
    """Energy the GPU consumed since the driver loaded, in joules (a counter)."""
    fan_pct: Percent | None = None
    """The fan's intended speed, as a share of its maximum; null on passively cooled GPUs."""
    memory_temperature_c: float | None = None
    """The memory's (HBM's) temperature, in °C."""
    encoder_util_pct: Percent | None = None
    """The share of time the video encoder was busy."""
    decoder_util_pct: Percent | None = None
    """The share of time the video decoder was busy."""


GPU_READINGS: tuple[str, ...] = tuple(f for f in GpuReadingFields.__struct_fields__ if f != "index")
"""The names of the readings GpuReadingFields declares."""


class GpuSample(GpuReadingFields, frozen=True, kw_only=True, gc=False):
    """One GPU at one tick: its readings (GpuReadingFields) and what it is."""

    uuid: str | None = None
    vendor: Vendor = "nvidia"
    name: str | None = None
    bus_id: str | None = None
    memory_total_bytes: NonNegative | None = None
    power_cap_w: float | None = None
    processes: list[GpuProcess] = msgspec.field(default_factory=list)
    mig_enabled: bool | None = None
    mig: list[MigInstance] = msgspec.field(default_factory=list)
    temperature_sensor: str | None = None
    """Which sensor `temperature_c` is ("edge", "junction"; AMD datacenter cards have no edge)."""
    memory_reserved_bytes: NonNegative | None = None
    """Memory the driver reserves for itself (neither used by processes nor free)."""
    driver_version: str | None = None
    """The version of the driver the GPU runs under ("580.159.04"; amdgpu's "6.3.6")."""
    health: GpuHealth | None = None
    """Its health as far as its tool tells; null where nothing of it was read."""


class HostSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The node's CPU and memory at one tick."""

    cpu_pct: Percent | None = None
    cpu_count: int | None = None
    memory_total_bytes: NonNegative | None = None
    memory_available_bytes: NonNegative | None = None
    load_1m: float | None = None


class SourceStatus(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How one GPU source fared this tick: `error` says what to do when `ok` is false."""

    name: str
    ok: bool
    latency_ms: float | None = None
    error: str | None = None
    vendor: Vendor | None = None
    degraded: bool = False
    """A probe of this tool survived SIGKILL (stuck in the driver); no new one until it exits."""


class ShardBrief(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A shard's verdict in a NodeSample; the full account is its ComputeStatus."""

    shard: str
    verdict: Verdict
    pid: int | None = None
    reason: str = ""
    sm_pct: WholePercent | None = None
    """As ComputeStatus.sm_pct, at this tick."""
    requests: NonNegative | None = None
    """As ComputeStatus.requests, at this tick."""


class NodeSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything one node saw in one interval, whole: what the worker samples, what
    `placewatch sample --json` prints and what FleetView.sample() gives. Not a message: on
    the wire it travels as a NodeInventory (what stays) and a NodeTelemetry (what changes),
    which `placewatch.schemas.lean` splits it into and joins back."""

    node: str
    session: str
    seq: NonNegative
    time: Time
    interval_s: float
    gpus: list[GpuSample] = msgspec.field(default_factory=list)
    host: HostSample | None = None
    shards: list[ShardBrief] = msgspec.field(default_factory=list)
    sources: list[SourceStatus] = msgspec.field(default_factory=list)
    dropped: NonNegative = 0
    """Samples not published since the last one that was (the bus was away)."""
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)
    """What was left out so that the message fits the server's max payload (see
    NodeTelemetry.omitted)."""
    inventory: str = ""
    """The id of the NodeInventory this sample's identity is in (empty until split)."""


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """What a GPU is, as it stays from tick to tick: its part of a NodeInventory."""

    index: NonNegative
    vendor: Vendor
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None
    memory_total_bytes: NonNegative | None = None
    power_cap_w: float | None = None
    mig_enabled: bool | None = None
    mig: list[MigInstance] = msgspec.field(default_factory=list)
    """Its MIG instances, without their memory used (that is a reading: mig_used_bytes)."""
    temperature_sensor: str | None = None
    memory_reserved_bytes: NonNegative | None = None
    driver_version: str | None = None
    health: GpuHealth | None = None
    """Its health as far as its tool tells, without its clock events (those are a reading:
    GpuReading.clock_events): the counts change rarely, and when they do, a new inventory
    is published. Null where nothing of it was read."""


class HostInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """What the host is: its part of a NodeInventory."""

    cpu_count: int | None = None
    memory_total_bytes: NonNegative | None = None


class ProcessInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A GPU process, as it stays while it runs: its name and the shard it belongs to."""

    name: str | None = None
    shard: str | None = None


class NodeInventory(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a node is, published on placewatch.inventory.<node> when its worker starts and
    whenever it changes, and kept as the last value per node (the stream
    PLACEWATCH_INVENTORY): its GPUs' identity and totals, MIG layout, host totals, and the
    name and shard of each GPU process. Its `id` names its content: each NodeTelemetry says
    which inventory its readings are of."""

    schema: int = SCHEMA_VERSION
    node: str
    session: str
    time: Time
    id: str
    """A digest of gpus, host and processes: equal content, equal id (across restarts)."""
    gpus: list[GpuInfo] = msgspec.field(default_factory=list)
    host: HostInfo | None = None
    processes: dict[int, ProcessInfo] = msgspec.field(default_factory=dict)
    """The GPU processes by pid."""
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)
    """What was left out so that the message fits the server's max payload."""


@_placed(after="power_w", fields=("processes", "mig_used_bytes"))
class GpuReading(GpuReadingFields, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """One GPU's readings at one tick. A reading the tool could not give is absent (null)."""

    processes: dict[int, NonNegative | None] = msgspec.field(default_factory=dict)
    """Pid -> the memory it holds on this GPU (null where the driver does not say)."""
    mig_used_bytes: list[NonNegative | None] = msgspec.field(default_factory=list)
    """Memory used in each MIG instance, in the inventory's order."""
    clock_events: list[str] = msgspec.field(default_factory=list)
    """GpuHealth.clock_events at this tick: what holds the clocks down now."""
    problems: list[str] = msgspec.field(default_factory=list)
    """GpuHealth.problems at this tick: why the GPU is unhealthy, left out while it is
    healthy. The rest of its health (counts that change rarely) is in the inventory's
    GpuInfo, so that a healthy fleet does not send them every tick."""


class HostReading(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """The host's readings at one tick."""

    cpu_pct: Percent | None = None
    memory_available_bytes: NonNegative | None = None
    load_1m: float | None = None


class ShardReading(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A shard's verdict at one tick; why, and on which devices, is in its ComputeStatus."""

    verdict: Verdict
    sm_pct: WholePercent | None = None
    """ComputeStatus.sm_pct at this tick, in whole percent; absent where no GPU tool gives
    per-process activity. (Each process's own activity and the shard's request count stay
    out of the telemetry, to keep it within its size: they are in the NodeSample and the
    ComputeStatus.)"""


class NodeTelemetry(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What one node read in one interval, published on placewatch.telemetry.<node>: the
    readings of the inventory named by `inventory`, and each shard's verdict."""

    schema: int = SCHEMA_VERSION
    node: str
    session: str
    seq: NonNegative
    time: Time
    interval_s: float
    inventory: str
    """The id of the node's NodeInventory these readings are of."""
    gpus: list[GpuReading] = msgspec.field(default_factory=list)
    host: HostReading | None = None
    shards: dict[str, ShardReading] = msgspec.field(default_factory=dict)
    """Shard name -> its verdict."""
    sources: list[SourceStatus] = msgspec.field(default_factory=list)
    dropped: NonNegative = 0
    """Samples not published since the last one that was (the bus was away)."""
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)
    """What was left out so that the message fits the server's max payload: a field's
    path -> the entries left out ("gpus.processes": 512)."""


class DeviceUse(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Memory a shard's processes hold on one GPU."""

    index: NonNegative
    uuid: str | None = None
    used_bytes: NonNegative = 0


class ComputeStatus(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where one shard computes, published on placewatch.compute.<node>.<shard>."""

    schema: int = SCHEMA_VERSION
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
    """The verdict evidence gave last, held while that evidence is lost (tools silent, log
    gone): lost evidence never resolves a fallback. The reason says what was lost."""
    stale_since: Time | None = None
    """When the evidence of a stale verdict was last had; None while it is fresh."""
    omitted: dict[str, NonNegative] = msgspec.field(default_factory=dict)
    """What was left out so that the message fits the server's max payload: a list field's
    name -> the entries left out ("evidence": 3), `reason` -> the characters cut from it."""
    container_id: str | None = None
    """The container its process runs in (64 hex digits, as Docker, containerd, CRI-O and
    Podman name it), from the process's cgroup; None outside a container or when unseen."""
    pod_uid: str | None = None
    """The Kubernetes pod its process runs in (the pod's metadata.uid), from its cgroup."""
    pod_namespace: str | None = None
    pod_name: str | None = None
    container_name: str | None = None
    """Its pod's namespace and name and its container's name, from the kubelet's log link."""
    sm_pct: WholePercent | None = None
    """How busy the shard keeps its busiest GPU: the share of time its processes ran kernels
    on that GPU's SMs (summed over its processes, as DCGM's per-process SM utilization),
    averaged over the reads of the last 30 s (ACTIVITY_WINDOW_S), in whole percent. Null where
    no GPU tool gives per-process utilization."""
    requests: NonNegative | None = None
    """Requests the engine's own log shows running or finished in the last 30 s
    (ACTIVITY_WINDOW_S); null until its log has shown one (no log, or an engine that does not
    print them)."""
    unhealthy_gpus: list[int] = msgspec.field(default_factory=list)
    """The GPUs it holds memory on that are unhealthy (GpuHealth.healthy false); the reason
    says why. The verdict stays where the shard computes."""
    engine: str | None = None
    """The engine that serves it, as its placement names it (`llama_cpp`, `ollama`, `vllm`,
    `sglang` where discovered); null where unsaid."""
    endpoint: Endpoint | None = None
    """Where it serves (scheme, host, port, path prefix), so that a gateway can tell which of
    its backends this is: its placement's `endpoint`, else its `health_url`'s, else what its
    engine's flags say; a bind to every address is given as the node's address for others.
    Null where none is known (a unix socket, a random port, no flags)."""


class FallbackEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A shard placed on GPUs entered (`firing`) or left (`resolved`) a fallback verdict."""

    schema: int = SCHEMA_VERSION
    state: FallbackState
    status: ComputeStatus
