"""The wire contract's Structs: defaults, constraints, and what a reader of an older or newer
version gets."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import get_args

import msgspec
import pytest

from placewatch.schemas import (
    FALLBACK_VERDICTS,
    MESSAGE_TYPES,
    SCHEMA_VERSION,
    ComputeStatus,
    FallbackEvent,
    GpuSample,
    HostSample,
    NodeTelemetry,
    PlacementSpec,
)
from placewatch.schemas.messages import Verdict

WHEN = datetime(2026, 11, 30, 5, 0, 0, 123456, tzinfo=UTC)


def test_unknown_fields_are_ignored_and_missing_ones_defaulted() -> None:
    newer = json.dumps(
        {
            "node": "n", "shard": "s", "session": "x", "time": "2026-01-01T00:00:00Z",
            "verdict": "gpu", "field_from_the_future": {"a": 1},
        }
    ).encode()  # fmt: skip
    decoded = msgspec.json.decode(newer, type=ComputeStatus)
    assert decoded.verdict == "gpu"
    assert decoded.backend == "unknown"
    assert decoded.devices == []
    assert decoded.layers_offloaded is None
    assert decoded.schema == SCHEMA_VERSION


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="<= 100"):
        msgspec.json.decode(b'{"index": 0, "utilization_pct": 140}', type=GpuSample)
    with pytest.raises(msgspec.ValidationError, match=">= 0"):
        msgspec.json.decode(b'{"index": -1}', type=GpuSample)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.memory_total_bytes"):
        msgspec.json.decode(b'{"memory_total_bytes": -5}', type=HostSample)


def test_a_gpu_with_no_readings_is_none_everywhere_not_zero() -> None:
    gpu = GpuSample(index=3)
    readings = {
        name: getattr(gpu, name)
        for name in GpuSample.__struct_fields__
        if name not in ("index", "vendor", "processes", "mig")
    }
    assert set(readings.values()) == {None}
    assert (gpu.vendor, gpu.processes, gpu.mig) == ("nvidia", [], [])


def test_telemetry_defaults_carry_the_schema_version_and_nothing_dropped() -> None:
    telemetry = NodeTelemetry(
        node="n", session="s", seq=0, time=WHEN, interval_s=2.0, inventory="0a1b2c3d4e5f"
    )
    assert telemetry.schema == SCHEMA_VERSION == 2
    assert telemetry.dropped == 0
    assert (telemetry.gpus, telemetry.shards, telemetry.sources, telemetry.host) == (
        [], {}, [], None,
    )  # fmt: skip


def test_messages_are_frozen_values() -> None:
    event = FallbackEvent(
        state="firing",
        status=ComputeStatus(node="n", shard="s", session="x", time=WHEN, verdict="partial"),
    )
    with pytest.raises(AttributeError):
        event.state = "resolved"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        event.status.verdict = "gpu"  # type: ignore[misc]


def test_placement_spec_reads_the_documented_fields() -> None:
    spec = msgspec.json.decode(
        b'{"id": "llama-8b-a", "pid": 12345, "gpus": [0, 1], "min_gpu_bytes": 1024}',
        type=PlacementSpec,
    )
    assert spec.id == "llama-8b-a"
    assert spec.pid == 12345
    assert spec.gpus == [0, 1]
    assert spec.match is None
    assert spec.min_gpu_bytes == 1024
    assert (spec.health_url, spec.log_path, spec.engine) == (None, None, None)


def test_a_placement_on_a_negative_gpu_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.gpus\[1\]"):
        msgspec.json.decode(b'{"id": "a", "gpus": [0, -1]}', type=PlacementSpec)


def test_fallback_verdicts_are_the_three_of_a_shard_not_computing_on_its_gpus() -> None:
    assert sorted(FALLBACK_VERDICTS) == ["cpu_fallback", "misplaced", "partial"]
    assert set(get_args(Verdict)) == {
        "starting", "gpu", "partial", "cpu_fallback", "misplaced", "cpu", "unknown", "gone",
    }  # fmt: skip


def test_the_top_level_messages_are_the_seven_a_header_can_name() -> None:
    assert [t.__name__ for t in MESSAGE_TYPES] == [
        "NodeTelemetry",
        "NodeInventory",
        "ComputeStatus",
        "FallbackEvent",
        "PlacementSpec",
        "NodeLease",
        "NodeForgotten",
    ]
