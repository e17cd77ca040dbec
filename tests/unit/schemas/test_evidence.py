"""Lost evidence as every reader reads it: GPU tools down, a node blind, a shard's evidence
age, and the inventory that keeps a GPU's health while no tool answers."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from placewatch.schemas import ComputeStatus, GpuHealth, SourceStatus, lean
from placewatch.schemas.evidence import evidence_age_s, gpu_sources, node_blind

from tests.unit.schemas.test_lean import WHEN, sample

SMI_FAILED = SourceStatus(
    name="nvidia-smi", ok=False, latency_ms=40.0, error="NVIDIA-SMI has failed", vendor="nvidia"
)
NVML_ABSENT = SourceStatus(
    name="nvml", ok=False, error="libnvidia-ml.so.1 not found", vendor="nvidia"
)
PLACEMENTS = SourceStatus(name="placements", ok=False, error="shards.toml: bad spec")


def test_gpu_tools_are_the_sources_that_name_a_vendor() -> None:
    ok = SourceStatus(name="nvml", ok=True, latency_ms=1.0, vendor="nvidia")
    assert gpu_sources([PLACEMENTS, ok, SMI_FAILED]) == [ok, SMI_FAILED]


def test_a_node_is_blind_when_no_gpu_tool_answers_where_one_ran_or_gpus_are_known() -> None:
    def blind(*sources: SourceStatus, gpus_known: bool = False, read: bool = False) -> bool:
        _, telemetry = lean.split(sample(sources=list(sources)))
        if not read:
            telemetry = msgspec.structs.replace(telemetry, gpus=[])
        return node_blind(telemetry, gpus_known)

    assert blind(NVML_ABSENT, SMI_FAILED, PLACEMENTS)
    assert blind(NVML_ABSENT, gpus_known=True)  # its tools gone from under its GPUs
    # A node with no GPU tool installed and no GPU known is not blind: it has none.
    assert not blind(NVML_ABSENT)
    assert not blind(PLACEMENTS, gpus_known=True)  # no GPU tool listed at all
    ok = SourceStatus(name="nvml", ok=True, latency_ms=1.0, vendor="nvidia")
    assert not blind(SMI_FAILED, ok, gpus_known=True)
    # A tool that printed its GPUs and then failed read them: not blind.
    assert not blind(SMI_FAILED, gpus_known=True, read=True)


def test_a_shard_s_evidence_age_counts_from_stale_since_and_is_0_while_fresh() -> None:
    fresh = ComputeStatus(node="n", shard="s", session="x", time=WHEN, verdict="gpu")
    assert evidence_age_s(fresh, WHEN + timedelta(hours=1)) == 0.0
    stale = msgspec.structs.replace(fresh, stale=True, stale_since=WHEN - timedelta(seconds=90))
    assert evidence_age_s(stale, WHEN) == 90.0
    assert evidence_age_s(stale, WHEN - timedelta(hours=1)) == 0.0  # never negative


def test_the_inventory_keeps_its_gpus_and_their_health_while_no_gpu_tool_answers() -> None:
    sick = GpuHealth(
        healthy=False,
        problems=["2 uncorrected ECC error(s) since the last reset: reset the GPU"],
        ecc_uncorrected_volatile=2,
    )
    whole = sample()
    whole = msgspec.structs.replace(
        whole, gpus=[msgspec.structs.replace(whole.gpus[0], health=sick), whole.gpus[1]]
    )
    first, _ = lean.split(whole)
    blind = sample(gpus=[], sources=[SMI_FAILED, PLACEMENTS], seq=42)
    inventory, telemetry = lean.split(blind, first)
    assert inventory.id == first.id  # nothing to publish again
    assert (inventory.gpus, inventory.processes) == (first.gpus, first.processes)
    assert telemetry.gpus == []  # no reading of them
    kept = lean.unread(inventory, telemetry)
    assert [(g.index, g.uuid, g.name) for g in kept] == [
        (0, "GPU-5e1a", "NVIDIA A100-SXM4-80GB"),
        (1, "GPU-0x1a2b", "AMD Instinct MI300X"),
    ]
    assert kept[0].health == sick
    assert (kept[0].memory_used_bytes, kept[0].temperature_c, kept[0].processes) == (None, None, [])
    # A tool that answers says what is there, even none.
    answered = sample(gpus=[], sources=[SourceStatus(name="nvml", ok=True, vendor="nvidia")])
    assert lean.split(answered, first)[0].gpus == []
    # Without a last inventory (the worker started blind) nothing is known to keep.
    assert lean.split(blind)[0].gpus == []


def test_no_gpu_is_unread_while_the_tools_answer_or_of_another_inventory() -> None:
    inventory, telemetry = lean.split(sample())
    assert lean.unread(inventory, telemetry) == []
    other = msgspec.structs.replace(telemetry, inventory="000000000000", gpus=[])
    assert lean.unread(inventory, other) == []
