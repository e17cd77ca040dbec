"""A FleetView's holdings made from constructed NodeSamples, as the nodes would publish them:
a node of two A100s (one reading every value, one few) and two shards."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from placewatch.consumer.fleet import Held, Holdings
from placewatch.schemas import (
    GpuHealth,
    GpuProcess,
    GpuSample,
    NodeSample,
    ShardBrief,
    encode,
    lean,
)
from placewatch.schemas.codec import HEADER_CONTENT_TYPE, Encoding

MIB = 1 << 20
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
UUID0 = "GPU-3f6c1a52-8e1b-4c2d-9a47-0b5d7e9f1a20"


def node_sample(
    node: str, taken: datetime, interval_s: float = 2.0, machine: str = ""
) -> NodeSample:
    """Two A100s; `machine` sets their uuids apart from another node_sample's (the same
    `machine`: the same two GPUs, as two workers on one machine report them)."""
    return NodeSample(
        node=node,
        session="s1",
        seq=7,
        time=taken,
        interval_s=interval_s,
        gpus=[
            GpuSample(
                index=0,
                uuid=UUID0 + machine,
                name="NVIDIA A100-SXM4-80GB",
                bus_id="00000000:07:00.0",
                utilization_pct=37.0,
                memory_total_bytes=81920 * MIB,
                memory_used_bytes=40960 * MIB + 5,  # not whole MiB: DCGM rounds down
                memory_free_bytes=40405 * MIB,
                foreign_bytes=10960 * MIB,
                temperature_c=45.0,
                power_w=212.34,
                processes=[
                    GpuProcess(pid=101, used_bytes=20000 * MIB, shard="llama"),
                    GpuProcess(pid=102, used_bytes=10000 * MIB, shard="llama"),
                    GpuProcess(pid=103, used_bytes=None, shard="qwen"),
                    GpuProcess(pid=104, used_bytes=64 * MIB, shard=None),
                ],
            ),
            GpuSample(
                index=1,
                uuid="GPU-9d2e" + machine,
                name="NVIDIA A100-SXM4-80GB",
                bus_id="00000000:0F:00.0",
                memory_used_bytes=0,
                memory_free_bytes=81365 * MIB,
            ),
        ],
        shards=[
            ShardBrief(shard="llama", verdict="gpu"),
            ShardBrief(shard="qwen", verdict="cpu_fallback"),
        ],
    )


def sick_node(node: str, taken: datetime) -> NodeSample:
    """node_sample's node with GPU 0 reading every new value and fallen off the bus, GPU 1 healthy."""
    s = node_sample(node, taken)
    gpu0 = msgspec.structs.replace(
        s.gpus[0],
        sm_clock_mhz=1410,
        memory_clock_mhz=1593,
        memory_util_pct=12.5,
        energy_j=123456.7895,
        fan_pct=None,  # an SXM board has no fan
        health=GpuHealth(
            healthy=False,
            problems=[
                "XID 79 (GPU has fallen off the bus): reset the GPU (nvidia-smi -r, with "
                "nothing running on it) or reboot the node",
                "2 uncorrected ECC error(s) since the last reset: reset the GPU (nvidia-smi -r, "
                "with nothing running on it) or reboot the node",
            ],
            xid_errors=3,
            last_xid=79,
            fatal_xid=79,
            ecc_corrected_volatile=17,
            ecc_uncorrected_volatile=2,
            ecc_corrected_aggregate=120,
            ecc_uncorrected_aggregate=2,
            retired_pages_pending=False,
            remapped_rows_correctable=4,
            remapped_rows_uncorrectable=1,
            remapped_rows_pending=False,
            remapped_rows_failed=False,
            clock_events=["sw_power_cap", "hw_thermal_slowdown"],
            pcie_gen=4,
            pcie_width=16,
            pcie_replays=31,
        ),
    )
    gpu1 = msgspec.structs.replace(s.gpus[1], fan_pct=30.0, health=GpuHealth(xid_errors=0))
    return msgspec.structs.replace(s, gpus=[gpu0, gpu1])


def held(sample: NodeSample, encoding: Encoding = "json", late_s: float = 0.0) -> tuple[Held, Held]:
    """The node's two messages as a view holds them, taken `late_s` after the sample's time
    (on the view's clock: a node whose clock is behind by that much)."""
    inventory, telemetry = lean.split(sample)
    t_data, t_headers = encode(telemetry, encoding)
    i_data, i_headers = encode(inventory, encoding)
    seen = telemetry.time.timestamp() + late_s
    return (
        Held(
            telemetry.time,
            telemetry.inventory,
            t_data,
            t_headers.get(HEADER_CONTENT_TYPE),
            seen=seen,
            session=telemetry.session,
            seq=telemetry.seq,
        ),
        Held(inventory.time, inventory.id, i_data, i_headers.get(HEADER_CONTENT_TYPE), seen=seen),
    )


def holdings(*samples: NodeSample, encoding: Encoding = "json", late_s: float = 0.0) -> Holdings:
    pairs = {s.node: held(s, encoding, late_s) for s in samples}
    return Holdings({n: t for n, (t, _) in pairs.items()}, {n: i for n, (_, i) in pairs.items()})
