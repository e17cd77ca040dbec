"""A GPU tool outage on /metrics, the fleet exporter's and the worker's alike: what is still
known stays (each GPU's identity and health, from the inventory), what is not is said (each
GPU tool up or down, the node blind, each shard's staleness and evidence age)."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from placewatch.consumer.exporter.collector import FleetCollector
from placewatch.consumer.fleet import Held, Holdings
from placewatch.schemas import (
    ComputeStatus,
    DeviceUse,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    SourceStatus,
    encode,
    lean,
)
from placewatch.schemas.codec import HEADER_CONTENT_TYPE
from placewatch.worker.latest import Latest
from placewatch.worker.metrics import NodeCollector

from tests.support.held import NOW, UUID0, sick_node
from tests.unit.consumer.test_exporter import Series, gpu_labels, parse_series

NODE = "gpu-07"
SMI = SourceStatus(name="nvidia-smi", ok=True, latency_ms=30.0, vendor="nvidia")
SMI_FAILED = SourceStatus(
    name="nvidia-smi", ok=False, latency_ms=40.0, error="NVIDIA-SMI has failed", vendor="nvidia"
)
SINCE = NOW - timedelta(seconds=95)
"""When the shards' evidence was last had: the tool's last answer."""


def outage() -> tuple[NodeInventory, NodeTelemetry, NodeSample, list[ComputeStatus]]:
    """sick_node (GPU 0 fallen off the bus, two uncorrected ECC errors, llama and qwen on
    it), then a tick at NOW with nvidia-smi failing: the inventory kept, the telemetry
    without a reading, each shard's status stale since SINCE, llama's in pod llama-0."""
    before = msgspec.structs.replace(sick_node(NODE, SINCE), sources=[SMI])
    first, _ = lean.split(before)
    blind = msgspec.structs.replace(before, seq=8, time=NOW, gpus=[], sources=[SMI_FAILED])
    inventory, telemetry = lean.split(blind, first)
    assert inventory.id == first.id
    statuses = [
        ComputeStatus(
            node=NODE,
            shard=shard,
            session="s1",
            time=NOW,
            verdict=verdict,  # type: ignore[arg-type]
            devices=[DeviceUse(index=0, used_bytes=1 << 30)],
            stale=True,
            stale_since=SINCE,
            pod_namespace="ml" if shard == "llama" else None,
            pod_name="llama-0" if shard == "llama" else None,
            container_name="main" if shard == "llama" else None,
        )
        for shard, verdict in (("llama", "gpu"), ("qwen", "cpu_fallback"))
    ]
    return inventory, telemetry, lean.join(inventory, telemetry), statuses


def exported(late_s: float = 0.0) -> Series:
    """The exporter's series of the outage, each message taken `late_s` after its time."""
    inventory, telemetry, _, statuses = outage()

    def hold(message: NodeInventory | NodeTelemetry) -> Held:
        data, headers = encode(message)
        ct = headers.get(HEADER_CONTENT_TYPE)
        seen = message.time.timestamp() + late_s
        return Held(message.time, telemetry.inventory, data, ct, seen=seen)

    content = Holdings({NODE: hold(telemetry)}, {NODE: hold(inventory)}, {NODE: statuses})
    now = NOW + timedelta(seconds=late_s)
    return parse_series(FleetCollector(lambda: content, clock=now.timestamp).collect())


def node_served() -> Series:
    inventory, telemetry, sample, statuses = outage()
    latest = Latest()
    latest.inventory, latest.statuses = inventory, tuple(statuses)
    latest.scraped = (telemetry, sample, NOW.timestamp())
    return parse_series(NodeCollector(latest, clock=NOW.timestamp).collect())


GPU0 = gpu_labels("0", UUID0, "00000000:07:00.0")


def test_an_unhealthy_gpu_stays_unhealthy_with_its_counts_while_its_tool_fails() -> None:
    for series in (exported(), node_served()):
        # Two shards' statuses put GPU 0 under them, llama's pod and qwen's none: no pod
        # label, as while it was read (test_a_gpu_s_pod_label_stays_through_the_outage).
        assert series[("placewatch_gpu_healthy", GPU0)] == 0.0
        assert series[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU0)] == 2.0
        assert series[("DCGM_FI_DEV_XID_ERRORS", GPU0)] == 79.0
        problems = sorted(
            dict(k[1])["problem"] for k, v in series.items() if k[0] == "placewatch_gpu_problem"
        )
        assert problems == [
            "XID 79 (GPU has fallen off the bus)",
            "uncorrected ECC error(s) since the last reset",
        ]
        assert series[("placewatch_gpu_stale", GPU0)] == 1.0
        # What only a reading says is no sample: nothing read it.
        readings = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK")
        assert not [k for k in series if k[0] in readings]
        on_sick = sorted(
            dict(k[1])["shard"]
            for k, v in series.items()
            if k[0] == "placewatch_shard_unhealthy_gpu" and v == 1.0
        )
        assert on_sick == ["llama", "qwen"]


def test_the_failing_tool_the_blind_node_and_each_shard_s_evidence_age_are_said() -> None:
    # The exporter took each message 30 s after its time: the node's clock is 30 s behind,
    # and ages are counted on the node's clock all the same.
    for series in (exported(), exported(late_s=30.0), node_served()):
        source = (("node", NODE), ("source", "nvidia-smi"), ("vendor", "nvidia"))
        assert series[("placewatch_gpu_source_up", source)] == 0.0
        assert series[("placewatch_node_blind", (("node", NODE),))] == 1.0
        for shard in ("llama", "qwen"):
            labels = (("node", NODE), ("shard", shard))
            assert series[("placewatch_shard_stale", labels)] == 1.0
            assert series[("placewatch_shard_evidence_age_seconds", labels)] == 95.0
        verdict = (("node", NODE), ("shard", "qwen"), ("verdict", "cpu_fallback"))
        assert series[("placewatch_shard_verdict", verdict)] == 1.0


def test_a_node_read_by_its_tool_is_not_blind_and_its_fresh_shards_age_0() -> None:
    sample = msgspec.structs.replace(sick_node(NODE, NOW), sources=[SMI])
    inventory, telemetry = lean.split(sample)
    fresh = ComputeStatus(node=NODE, shard="llama", session="s1", time=NOW, verdict="gpu")
    latest = Latest()
    latest.inventory, latest.statuses = inventory, (fresh,)
    latest.scraped = (telemetry, sample, NOW.timestamp())
    series = parse_series(NodeCollector(latest, clock=NOW.timestamp).collect())
    source = (("node", NODE), ("source", "nvidia-smi"), ("vendor", "nvidia"))
    assert series[("placewatch_gpu_source_up", source)] == 1.0
    assert series[("placewatch_node_blind", (("node", NODE),))] == 0.0
    labels = (("node", NODE), ("shard", "llama"))
    assert series[("placewatch_shard_stale", labels)] == 0.0
    assert series[("placewatch_shard_evidence_age_seconds", labels)] == 0.0
    # qwen has no status held: its staleness is unknown, so no sample, never 0
    assert ("placewatch_shard_stale", (("node", NODE), ("shard", "qwen"))) not in series
    stale = {k[1]: v for k, v in series.items() if k[0] == "placewatch_gpu_stale"}
    assert sorted(dict(k)["gpu"] for k in stale) == ["0", "1"]
    assert set(stale.values()) == {0.0}


def test_a_node_without_gpu_tools_or_gpus_is_not_blind() -> None:
    absent = SourceStatus(
        name="nvml", ok=False, error="libnvidia-ml.so.1 not found", vendor="nvidia"
    )
    sample = msgspec.structs.replace(sick_node(NODE, NOW), gpus=[], sources=[absent])
    inventory, telemetry = lean.split(sample)
    latest = Latest()
    latest.inventory = inventory
    latest.scraped = (telemetry, sample, NOW.timestamp())
    series = parse_series(NodeCollector(latest, clock=NOW.timestamp).collect())
    assert series[("placewatch_node_blind", (("node", NODE),))] == 0.0
    source = (("node", NODE), ("source", "nvml"), ("vendor", "nvidia"))
    assert series[("placewatch_gpu_source_up", source)] == 0.0


def test_a_gpu_s_pod_label_stays_through_the_outage() -> None:
    """Its labels are the alert's: a pod label lost when the tool fails would end every
    alert of the GPU and fire another."""
    inventory, telemetry, sample, statuses = outage()
    only_llama = [statuses[0], msgspec.structs.replace(statuses[1], devices=[])]
    latest = Latest()
    latest.inventory, latest.statuses = inventory, tuple(only_llama)
    latest.scraped = (telemetry, sample, NOW.timestamp())
    held = parse_series(NodeCollector(latest, clock=NOW.timestamp).collect())
    before = sick_node(NODE, SINCE)
    gpu0 = msgspec.structs.replace(before.gpus[0], processes=before.gpus[0].processes[:2])
    read = msgspec.structs.replace(before, gpus=[gpu0, before.gpus[1]], sources=[SMI])
    latest.inventory, telemetry = lean.split(read)
    latest.scraped = (telemetry, read, SINCE.timestamp())
    fresh = parse_series(NodeCollector(latest, clock=SINCE.timestamp).collect())
    on_pod = tuple(sorted((*GPU0, ("container", "main"), ("namespace", "ml"), ("pod", "llama-0"))))
    assert held[("placewatch_gpu_healthy", on_pod)] == fresh[("placewatch_gpu_healthy", on_pod)]
    problems = [k[1] for k in held if k[0] == "placewatch_gpu_problem"]
    assert len(problems) == 2
    assert problems == [k[1] for k in fresh if k[0] == "placewatch_gpu_problem"]
