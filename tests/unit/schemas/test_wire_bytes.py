"""The JSON a node publishes for a GPU with every field set, byte for byte as pinned in
tests/fixtures/wire: a change to how the Structs are declared must not move a key, rename
one, or change how a value is written (a gateway may hash or diff these bytes)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from placewatch.schemas import (
    GpuHealth,
    GpuProcess,
    GpuSample,
    HostSample,
    MigInstance,
    NodeSample,
    ShardBrief,
    SourceStatus,
    lean,
)

from tests.conftest import FIXTURES

WIRE = FIXTURES / "wire"
WHEN = datetime(2026, 12, 1, 6, 0, 0, 250000, tzinfo=UTC)
GiB = 1 << 30


def full_gpu() -> GpuSample:
    """An H100 in MIG mode, every field of the sample and of its health set (none default)."""
    return GpuSample(
        index=3,
        uuid="GPU-5e1a9c",
        vendor="nvidia",
        name="NVIDIA H100 80GB HBM3",
        bus_id="00000000:9A:00.0",
        utilization_pct=87.0,
        activity="busy",
        memory_total_bytes=80 * GiB,
        memory_used_bytes=61 * GiB,
        memory_free_bytes=18 * GiB,
        foreign_bytes=1 * GiB,
        temperature_c=54.0,
        power_w=512.25,
        power_cap_w=700.0,
        processes=[
            GpuProcess(pid=4242, used_bytes=40 * GiB, shard="llama-a", name="llama-server"),
            GpuProcess(pid=4243, used_bytes=None, shard="llama-a", name="llama-server"),
            GpuProcess(pid=5151, used_bytes=20 * GiB, name="python3", sm_pct=12, mem_pct=3),
        ],
        mig_enabled=True,
        mig=[
            MigInstance(
                gpu_instance_id=1,
                compute_instance_id=0,
                uuid="MIG-1",
                profile="3g.40gb",
                memory_total_bytes=40 * GiB,
                memory_used_bytes=39 * GiB,
            ),
            MigInstance(gpu_instance_id=2, uuid="MIG-2", profile="3g.40gb"),
        ],
        temperature_sensor="edge",
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
        memory_util_pct=41.5,
        energy_j=81234567.891,
        fan_pct=30.0,
        memory_reserved_bytes=512 << 20,
        memory_temperature_c=61.0,
        encoder_util_pct=5.0,
        decoder_util_pct=7.5,
        driver_version="580.159.04",
        health=GpuHealth(
            healthy=False,
            problems=["XID 79: the GPU has fallen off the bus; reset it or reboot the node"],
            xid_errors=2,
            last_xid=79,
            last_xid_time=WHEN,
            fatal_xid=79,
            ecc_corrected_volatile=4,
            ecc_uncorrected_volatile=1,
            ecc_corrected_aggregate=40,
            ecc_uncorrected_aggregate=2,
            retired_pages_sbe=0,
            retired_pages_dbe=1,
            retired_pages_pending=True,
            remapped_rows_correctable=3,
            remapped_rows_uncorrectable=1,
            remapped_rows_pending=True,
            remapped_rows_failed=False,
            clock_events=["sw_power_cap", "hw_thermal_slowdown"],
            pcie_gen=5,
            pcie_width=16,
            pcie_replays=9,
            recovery_action="reset",
        ),
    )


def full_node() -> NodeSample:
    return NodeSample(
        node="gpu-07",
        session="d9eab6f1c983",
        seq=41,
        time=WHEN,
        interval_s=2.0,
        gpus=[full_gpu(), GpuSample(index=4, vendor="amd")],
        host=HostSample(
            cpu_pct=12.5,
            cpu_count=64,
            memory_total_bytes=1 << 40,
            memory_available_bytes=1 << 39,
            load_1m=3.25,
        ),
        shards=[
            ShardBrief(shard="llama-a", verdict="gpu", pid=4242, reason="on GPU 3", sm_pct=87),
        ],
        sources=[SourceStatus(name="nvml", ok=True, latency_ms=1.2, vendor="nvidia")],
        dropped=3,
        omitted={"gpus.processes": 2},
    )


def test_a_full_gpu_s_telemetry_and_inventory_are_the_pinned_bytes() -> None:
    inventory, telemetry = lean.split(full_node())
    assert msgspec.json.encode(telemetry) == (WIRE / "telemetry.json").read_bytes().rstrip()
    assert msgspec.json.encode(inventory) == (WIRE / "inventory.json").read_bytes().rstrip()
