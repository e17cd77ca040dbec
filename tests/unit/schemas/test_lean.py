"""A sample split into inventory and telemetry, joined back; their sizes; old readers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from bench.synthetic import HEALTHY, node_sample
from placewatch.schemas import (
    ComputeStatus,
    DecodeError,
    GpuHealth,
    GpuProcess,
    GpuSample,
    HostSample,
    MigInstance,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    ShardBrief,
    SourceStatus,
    decode,
    encode,
    lean,
)
from placewatch.schemas.lean import InventoryMismatch
from placewatch.schemas.messages import GPU_READINGS, GpuReadingFields

WHEN = datetime(2026, 12, 1, 6, 0, 0, 250000, tzinfo=UTC)


def sample(**changes: object) -> NodeSample:
    """A node of an NVIDIA GPU in MIG mode and an AMD GPU, a shard on each."""
    nvidia = GpuSample(
        index=0,
        uuid="GPU-5e1a",
        name="NVIDIA A100-SXM4-80GB",
        bus_id="00000000:07:00.0",
        utilization_pct=None,
        activity="busy",
        memory_total_bytes=80 << 30,
        memory_used_bytes=21 << 30,
        memory_free_bytes=58 << 30,
        foreign_bytes=0,
        temperature_c=41.0,
        power_w=88.25,
        power_cap_w=400.0,
        processes=[
            GpuProcess(pid=4242, used_bytes=20 << 30, shard="llama-a", name="llama-server"),
            GpuProcess(pid=4243, used_bytes=None, shard="llama-a", name="llama-server"),
        ],
        mig_enabled=True,
        mig=[
            MigInstance(gpu_instance_id=1, uuid="MIG-1", profile="3g.40gb", memory_used_bytes=9),
            MigInstance(gpu_instance_id=2, uuid="MIG-2", profile="3g.40gb", memory_used_bytes=None),
        ],
    )
    amd = GpuSample(
        index=1,
        uuid="GPU-0x1a2b",
        vendor="amd",
        name="AMD Instinct MI300X",
        utilization_pct=97.0,
        activity="busy",
        memory_total_bytes=192 << 30,
        memory_used_bytes=150 << 30,
        temperature_c=61.5,
        temperature_sensor="junction",
        processes=[GpuProcess(pid=5151, used_bytes=149 << 30, shard="qwen-b", name="python3")],
    )
    whole = NodeSample(
        node="gpu-07",
        session="d9eab6f1c983",
        seq=41,
        time=WHEN,
        interval_s=2.0,
        gpus=[nvidia, amd],
        host=HostSample(
            cpu_pct=12.5, cpu_count=64, memory_total_bytes=1 << 40, memory_available_bytes=1 << 39
        ),
        shards=[
            ShardBrief(
                shard="llama-a",
                verdict="gpu",
                pid=4242,
                reason="on GPU 0 as placed",
                sm_pct=87,
                requests=4,
            ),
            ShardBrief(shard="qwen-b", verdict="partial", pid=5151, reason="17 of 33 layers"),
        ],
        sources=[SourceStatus(name="nvml", ok=True, latency_ms=1.2, vendor="nvidia")],
        dropped=3,
    )
    return msgspec.structs.replace(whole, **changes)


def statuses(s: NodeSample) -> dict[str, ComputeStatus]:
    return {
        b.shard: ComputeStatus(
            node=s.node,
            shard=b.shard,
            session=s.session,
            time=s.time,
            pid=b.pid,
            reason=b.reason,
            requests=b.requests,
        )
        for b in s.shards
    }


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_split_then_join_through_the_wire_is_the_sample(encoding: str) -> None:
    whole = sample()
    inventory, telemetry = lean.split(whole)
    sent = [encode(m, encoding) for m in (inventory, telemetry)]  # type: ignore[arg-type]
    got_inventory = decode(sent[0][0], NodeInventory, sent[0][1])
    got_telemetry = decode(sent[1][0], NodeTelemetry, sent[1][1])
    joined = lean.join(got_inventory, got_telemetry, statuses(whole))
    assert joined == msgspec.structs.replace(whole, inventory=inventory.id)
    # Without the statuses the pids, reasons and requests are unknown; the rest is whole.
    bare = lean.join(got_inventory, got_telemetry)
    assert [(b.shard, b.verdict, b.pid, b.reason, b.sm_pct, b.requests) for b in bare.shards] == [
        ("llama-a", "gpu", None, "", 87, None),
        ("qwen-b", "partial", None, "", None, None),
    ]
    assert bare.gpus == joined.gpus


def test_what_stays_is_in_the_inventory_what_changes_in_the_telemetry() -> None:
    inventory, telemetry = lean.split(sample())
    assert [(g.index, g.uuid, g.vendor, g.memory_total_bytes) for g in inventory.gpus] == [
        (0, "GPU-5e1a", "nvidia", 80 << 30),
        (1, "GPU-0x1a2b", "amd", 192 << 30),
    ]
    assert [m.memory_used_bytes for m in inventory.gpus[0].mig] == [None, None]
    assert {pid: (p.name, p.shard) for pid, p in inventory.processes.items()} == {
        4242: ("llama-server", "llama-a"),
        4243: ("llama-server", "llama-a"),
        5151: ("python3", "qwen-b"),
    }
    assert telemetry.inventory == inventory.id and len(inventory.id) == 12
    assert telemetry.gpus[0].processes == {4242: 20 << 30, 4243: None}
    assert telemetry.gpus[0].mig_used_bytes == [9, None]
    assert {k: v.verdict for k, v in telemetry.shards.items()} == {
        "llama-a": "gpu",
        "qwen-b": "partial",
    }
    assert telemetry.dropped == 3


def test_a_shard_s_sm_use_travels_each_process_s_activity_stays_in_the_sample() -> None:
    busy = sample()
    nvidia = busy.gpus[0]
    ran = [msgspec.structs.replace(p, sm_pct=61, mem_pct=9) for p in nvidia.processes]
    busy = msgspec.structs.replace(
        busy, gpus=[msgspec.structs.replace(nvidia, processes=ran), busy.gpus[1]]
    )
    inventory, telemetry = lean.split(busy)
    payload = encode(telemetry)[0]
    assert b'"llama-a":{"verdict":"gpu","sm_pct":87}' in payload
    assert b'"qwen-b":{"verdict":"partial"}' in payload  # nothing more where nothing is known
    assert b"mem_pct" not in payload and b"requests" not in payload
    assert lean.split(busy)[0].id == lean.split(sample())[0].id  # a reading, not the inventory
    joined = lean.join(inventory, decode(payload, NodeTelemetry), statuses(busy))
    assert [(p.pid, p.sm_pct, p.mem_pct) for p in joined.gpus[0].processes] == [
        (4242, None, None),
        (4243, None, None),
    ]
    assert [(b.shard, b.sm_pct, b.requests) for b in joined.shards] == [
        ("llama-a", 87, 4),
        ("qwen-b", None, None),
    ]


def test_the_inventory_id_follows_its_content_only() -> None:
    first, _ = lean.split(sample())
    later, _ = lean.split(
        sample(session="0123456789ab", seq=900, time=WHEN + timedelta(hours=5), dropped=0)
    )
    assert later.id == first.id  # a restart, another tick: the same inventory
    hotter = sample()
    hotter = msgspec.structs.replace(
        hotter, gpus=[msgspec.structs.replace(g, temperature_c=90.0) for g in hotter.gpus]
    )
    assert lean.split(hotter)[0].id == first.id  # a reading is not the inventory
    started = sample()
    gpu = started.gpus[1]
    more = [*gpu.processes, GpuProcess(pid=6000, used_bytes=1, shard=None, name="python3")]
    started = msgspec.structs.replace(
        started, gpus=[started.gpus[0], msgspec.structs.replace(gpu, processes=more)]
    )
    assert lean.split(started)[0].id != first.id  # a process started
    capped = sample()
    capped = msgspec.structs.replace(
        capped, gpus=[msgspec.structs.replace(capped.gpus[0], power_cap_w=300.0), capped.gpus[1]]
    )
    assert lean.split(capped)[0].id != first.id  # an operator set a power cap


def test_the_last_inventory_lends_its_id_only_while_its_content_stands() -> None:
    first, _ = lean.split(sample())
    gpu = sample().gpus[1]
    more = [*gpu.processes, GpuProcess(pid=6000, used_bytes=1, shard=None, name="python3")]
    changed = [
        sample(seq=900, time=WHEN + timedelta(hours=5)),  # another tick: the same content
        msgspec.structs.replace(sample(), gpus=[sample().gpus[0], gpu, gpu]),  # a GPU more
        msgspec.structs.replace(
            sample(), gpus=[sample().gpus[0], msgspec.structs.replace(gpu, processes=more)]
        ),
    ]
    for whole in changed:
        assert lean.split(whole, first)[0].id == lean.split(whole)[0].id
    # The id is taken from the last inventory, not worked out again, while the content is the
    # same: an id the last one carried comes back, whatever it is.
    marked = msgspec.structs.replace(first, id="0123456789ab")
    assert lean.split(sample(seq=901), marked)[0].id == "0123456789ab"
    assert lean.split(changed[1], marked)[0].id == lean.split(changed[1])[0].id


def test_one_pid_in_two_mig_instances_of_a_gpu_reads_as_its_sum() -> None:
    gpu = GpuSample(
        index=0, processes=[GpuProcess(pid=7, used_bytes=5), GpuProcess(pid=7, used_bytes=6)]
    )
    unknown = GpuSample(
        index=1, processes=[GpuProcess(pid=8, used_bytes=5), GpuProcess(pid=8, used_bytes=None)]
    )
    _, telemetry = lean.split(sample(gpus=[gpu, unknown]))
    assert [g.processes for g in telemetry.gpus] == [{7: 11}, {8: None}]


def test_joining_with_another_inventory_says_which_it_needs() -> None:
    inventory, telemetry = lean.split(sample())
    other, _ = lean.split(sample(gpus=[]))
    with pytest.raises(InventoryMismatch) as caught:
        lean.join(other, telemetry)
    assert str(caught.value) == (
        f"telemetry of gpu-07 seq 41 is of inventory {inventory.id!r}, not {other.id!r}"
    )


def test_whole_numbers_travel_as_integers_and_read_back_as_floats() -> None:
    _, telemetry = lean.split(sample())
    payload, headers = encode(telemetry)
    assert b'"temperature_c":41,' in payload and b'"power_w":88.25' in payload
    back = decode(payload, NodeTelemetry, headers)
    assert back.gpus[0].temperature_c == 41.0 and isinstance(back.gpus[0].temperature_c, float)


def test_a_busy_node_s_telemetry_is_within_its_size_targets() -> None:
    """8 GPUs, 64 processes, 16 shards, each process's activity read and each shard's SM use
    and requests known: at most 4 KB of JSON and 2.5 KB of msgpack a tick, where the whole
    sample was 11.5 KB of JSON (the message of schema 1)."""
    whole = node_sample(readings=False)
    _, telemetry = lean.split(whole)
    as_json, as_msgpack = encode(telemetry)[0], encode(telemetry, "msgpack")[0]
    assert len(as_json) <= 4000 and len(as_msgpack) <= 2500, (len(as_json), len(as_msgpack))
    assert len(msgspec.json.encode(whole)) > 11_000  # what every tick carried before
    assert sum(len(g.processes) for g in telemetry.gpus) == 64 and len(telemetry.shards) == 16
    assert all(p.sm_pct is not None for g in whole.gpus for p in g.processes)
    assert all(s.sm_pct is not None for s in telemetry.shards.values())


class FirstNodeTelemetry(msgspec.Struct, kw_only=True):
    """NodeTelemetry as schema 1 defined it, as a reader built against schema 1 decodes it."""

    schema: int = 1
    node: str
    session: str
    seq: int
    time: datetime
    interval_s: float
    gpus: list[GpuSample] = msgspec.field(default_factory=list)
    host: HostSample | None = None
    shards: list[ShardBrief] = msgspec.field(default_factory=list)
    sources: list[SourceStatus] = msgspec.field(default_factory=list)
    dropped: int = 0


@pytest.mark.parametrize("gpus", [True, False])
def test_a_reader_of_schema_1_fails_on_the_new_telemetry_never_reads_it_wrong(gpus: bool) -> None:
    _, telemetry = lean.split(sample() if gpus else sample(gpus=[], shards=[]))
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(encode(telemetry)[0], type=FirstNodeTelemetry)
    where = "$.gpus[0].processes" if gpus else "$.shards"
    assert str(caught.value) == f"Expected `array`, got `object` - at `{where}`"
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(encode(telemetry, "msgpack")[0], type=FirstNodeTelemetry)


def test_this_reader_refuses_schema_1_telemetry_saying_why() -> None:
    first = FirstNodeTelemetry(node="gpu-07", session="s", seq=1, time=WHEN, interval_s=2.0)
    payload = msgspec.json.encode(first)
    headers = {"Placewatch-Type": "NodeTelemetry", "Placewatch-Schema": "1"}
    with pytest.raises(DecodeError) as caught:
        decode(payload, NodeTelemetry, headers)
    assert str(caught.value) == (
        "a NodeTelemetry of schema 1, which this reader no longer reads (telemetry was split "
        "into a NodeInventory and readings in schema 2): upgrade the placewatch that sent it "
        "(docs/subjects.md, Changes)"
    )
    with pytest.raises(DecodeError, match=r"Expected `object`, got `array` - at `\$\.shards`"):
        decode(payload, NodeTelemetry)  # no header: its payload cannot pass for schema 2


def with_health(whole: NodeSample, health: GpuHealth, **readings: object) -> NodeSample:
    gpus = [msgspec.structs.replace(g, health=health, **readings) for g in whole.gpus]
    return msgspec.structs.replace(whole, gpus=gpus)


def test_a_healthy_gpu_s_counts_travel_in_the_inventory_not_every_tick() -> None:
    plain = node_sample(readings=False)
    healthy = with_health(plain, HEALTHY)
    (inventory, telemetry), (bare_inventory, bare_telemetry) = (
        lean.split(healthy),
        lean.split(plain),
    )
    assert encode(telemetry)[0] == encode(bare_telemetry)[0].replace(
        bare_telemetry.inventory.encode(), telemetry.inventory.encode()
    )
    assert inventory.id != bare_inventory.id
    assert all(g.health == HEALTHY for g in inventory.gpus)
    assert lean.join(inventory, telemetry).gpus[0].health == HEALTHY


def test_an_unhealthy_gpu_is_named_in_the_telemetry_itself() -> None:
    sick = msgspec.structs.replace(
        HEALTHY,
        healthy=False,
        fatal_xid=79,
        last_xid=79,
        xid_errors=1,
        problems=["XID 79 (GPU has fallen off the bus): reset the GPU"],
        clock_events=["hw_slowdown"],
    )
    whole = node_sample(readings=False)
    whole = msgspec.structs.replace(
        whole, gpus=[msgspec.structs.replace(whole.gpus[0], health=sick), *whole.gpus[1:]]
    )
    inventory, telemetry = lean.split(whole)
    payload = encode(telemetry)[0]
    assert payload.count(b'"problems":["XID 79 (GPU has fallen off the bus)') == 1
    assert payload.count(b'"clock_events":["hw_slowdown"]') == 1
    assert inventory.gpus[0].health is not None and inventory.gpus[0].health.clock_events == []
    assert lean.join(inventory, telemetry).gpus[0].health == sick


def test_what_the_dcgm_readings_add_to_a_busy_node_s_telemetry() -> None:
    """The clocks, memory utilization and energy of 8 GPUs, read every tick: 89 bytes of
    JSON and 71 of msgpack a GPU on the message of the size targets above, which they
    take over them (docs/benchmarks.md, Fleet scale). The health counts cost nothing a
    tick."""
    plain = lean.split(node_sample(readings=False))[1]
    read = lean.split(node_sample())[1]
    added_json = len(encode(read)[0]) - len(encode(plain)[0])
    added_msgpack = len(encode(read, "msgpack")[0]) - len(encode(plain, "msgpack")[0])
    assert (added_json, added_msgpack) == (8 * 89, 8 * 71)
    assert all(g.sm_clock_mhz == 1980 and g.energy_j for g in read.gpus)


def test_every_field_of_a_gpu_and_the_host_is_split_and_joined() -> None:
    """A new reading is a field of GpuReadingFields: GpuSample and GpuReading both have it,
    and split and join copy it by name, with nothing to add in lean.py."""
    from placewatch.schemas import (
        GpuInfo,
        GpuReading,
        GpuSample,
        HostInfo,
        HostReading,
        HostSample,
        lean,
    )

    declared = set(GPU_READINGS)
    telemetry_only = {"index", "processes", "mig_used_bytes", "clock_events", "problems"}
    assert set(GpuReading.__struct_fields__) - telemetry_only == declared
    gpu = set(GpuSample.__struct_fields__)
    assert gpu == set(lean._GPU_INFO) | declared | lean.BY_HAND
    assert set(lean._GPU_INFO) < set(GpuInfo.__struct_fields__)
    assert not declared & set(GpuInfo.__struct_fields__)
    assert set(HostSample.__struct_fields__) == set(lean._HOST_INFO) | set(lean._HOST_READING)
    assert {"utilization_pct", "fan_pct", "energy_j", "encoder_util_pct"} <= declared
    assert {"uuid", "name", "memory_total_bytes"} <= set(lean._GPU_INFO)
    assert set(HostInfo.__struct_fields__) == set(lean._HOST_INFO)
    assert set(HostReading.__struct_fields__) == set(lean._HOST_READING)


def a_reading(field: msgspec.structs.FieldInfo) -> object:
    """A value of the declared reading's type other than its default (None, no reading): the
    highest whole number below 90 its constraints allow (and a half, for a float), the last
    of a Literal's values, or a string."""
    info = msgspec.inspect.type_info(field.type)
    assert isinstance(info, msgspec.inspect.UnionType), f"{field.name}: a reading is X | None"
    kinds = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
    assert len(kinds) == 1, f"{field.name}: a reading is one type or None"
    kind = kinds[0]
    if isinstance(kind, msgspec.inspect.LiteralType):
        return kind.values[-1]
    if isinstance(kind, msgspec.inspect.StrType):
        return f"{field.name} read"
    assert isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType), kind
    high = 89 if kind.le is None else min(89, int(kind.le))
    return high if isinstance(kind, msgspec.inspect.IntType) else high + 0.5


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_every_declared_reading_reaches_the_telemetry_and_comes_back_joined(
    encoding: str,
) -> None:
    """Each field of GpuReadingFields, set, travels in the telemetry (not the inventory) and
    the joined sample has it: what a reading added to the declaration gets with no more."""
    fields = [f for f in msgspec.structs.fields(GpuReadingFields) if f.name in GPU_READINGS]
    readings = {f.name: a_reading(f) for f in fields}
    whole = sample()
    whole = msgspec.structs.replace(
        whole, gpus=[msgspec.structs.replace(whole.gpus[0], **readings), whole.gpus[1]]
    )
    inventory, telemetry = lean.split(whole)
    sent = [encode(m, encoding) for m in (inventory, telemetry)]  # type: ignore[arg-type]
    wire = msgspec.json.decode(encode(telemetry, "json")[0])
    assert {name: wire["gpus"][0][name] for name in readings} == readings
    assert not set(readings) & set(msgspec.json.decode(encode(inventory, "json")[0])["gpus"][0])
    joined = lean.join(
        decode(sent[0][0], NodeInventory, sent[0][1]),
        decode(sent[1][0], NodeTelemetry, sent[1][1]),
        statuses(whole),
    )
    assert {name: getattr(joined.gpus[0], name) for name in readings} == readings
    assert joined == msgspec.structs.replace(whole, inventory=inventory.id)


def test_a_part_with_a_field_the_whole_lacks_is_said_at_import() -> None:
    from placewatch.schemas import GpuSample, lean

    class Stray(msgspec.Struct):
        index: int
        wattage: float

    with pytest.raises(TypeError, match=r"Stray has \['wattage'\], which GpuSample lacks"):
        lean._copied(Stray, GpuSample, {"index"})
