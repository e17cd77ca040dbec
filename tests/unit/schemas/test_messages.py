"""The wire contract: Structs, subjects, codec and headers."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import msgspec
import pytest

from placewatch.schemas import (
    SCHEMA_VERSION,
    ComputeStatus,
    DecodeError,
    DeviceUse,
    FallbackEvent,
    GpuProcess,
    GpuSample,
    HostSample,
    NodeTelemetry,
    PlacementSpec,
    ShardBrief,
    SourceStatus,
    decode,
    decode_any,
    encode,
    json_schema,
    subjects,
)

WHEN = datetime(2026, 11, 30, 5, 0, 0, 123456, tzinfo=UTC)


def telemetry() -> NodeTelemetry:
    return NodeTelemetry(
        node="gpu-01",
        session="abc123",
        seq=7,
        time=WHEN,
        interval_s=2.0,
        gpus=[
            GpuSample(
                index=0,
                uuid="GPU-1",
                name="NVIDIA A100",
                utilization_pct=37,
                activity="busy",
                memory_total_bytes=80 << 30,
                memory_used_bytes=40 << 30,
                processes=[GpuProcess(pid=4242, used_bytes=38 << 30, shard="llama-a")],
            )
        ],
        host=HostSample(cpu_pct=12.5, cpu_count=64, memory_total_bytes=1 << 40),
        shards=[ShardBrief(shard="llama-a", verdict="gpu")],
        sources=[SourceStatus(name="nvidia-smi", ok=True, latency_ms=41.0)],
    )


def status() -> ComputeStatus:
    return ComputeStatus(
        node="gpu-01",
        shard="llama-a",
        session="abc123",
        time=WHEN,
        pid=4242,
        placed_gpus=[1],
        backend="CPU",
        devices=[],
        verdict="cpu_fallback",
        reason="placed on GPU 1 but holds no memory there",
    )


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_telemetry_round_trips_with_contract_headers(encoding: str) -> None:
    payload, headers = encode(telemetry(), encoding)  # type: ignore[arg-type]
    assert headers["Content-Type"] == f"application/{encoding}"
    assert headers["Placewatch-Type"] == "NodeTelemetry"
    assert headers["Placewatch-Schema"] == str(SCHEMA_VERSION)
    assert "Nats-Msg-Id" not in headers
    assert decode(payload, NodeTelemetry, headers) == telemetry()


def test_json_is_readable_with_rfc3339_utc_times_and_exact_bytes() -> None:
    payload, _ = encode(telemetry())
    doc = json.loads(payload)
    assert doc["time"] == "2026-11-30T05:00:00.123456Z"
    assert doc["gpus"][0]["memory_total_bytes"] == 85899345920
    assert doc["gpus"][0]["temperature_c"] is None
    assert doc["schema"] == SCHEMA_VERSION


def test_event_carries_message_id() -> None:
    event = FallbackEvent(state="firing", status=status())
    payload, headers = encode(event, msg_id="gpu-01.llama-a.abc123.1")
    assert headers["Nats-Msg-Id"] == "gpu-01.llama-a.abc123.1"
    assert headers["Placewatch-Type"] == "FallbackEvent"
    decoded = decode_any(payload, headers)
    assert isinstance(decoded, FallbackEvent)
    assert decoded.status.verdict == "cpu_fallback"
    assert decoded.status.placed_gpus == [1]


def test_unknown_fields_are_ignored_and_missing_ones_defaulted() -> None:
    newer = json.dumps(
        {
            "node": "n", "shard": "s", "session": "x", "time": "2026-01-01T00:00:00Z",
            "verdict": "gpu", "field_from_the_future": {"a": 1},
        }
    ).encode()  # fmt: skip
    decoded = decode(newer, ComputeStatus)
    assert decoded.verdict == "gpu"
    assert decoded.backend == "unknown"
    assert decoded.devices == []
    assert decoded.layers_offloaded is None


def test_missing_content_type_means_json() -> None:
    payload = msgspec.json.encode(status())
    assert decode(payload, ComputeStatus, {}) == status()
    assert decode(payload, ComputeStatus, None) == status()
    assert (
        decode(payload, ComputeStatus, {"Content-Type": "application/json; charset=utf-8"})
        == status()
    )


def test_bad_payload_names_the_type() -> None:
    with pytest.raises(DecodeError, match="not a valid NodeTelemetry"):
        decode(b'{"node": 5}', NodeTelemetry)
    with pytest.raises(DecodeError, match="unknown Placewatch-Type 'Nope'"):
        decode_any(b"{}", {"Placewatch-Type": "Nope"})


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(DecodeError):
        decode(b'{"index": 0, "utilization_pct": 140}', GpuSample)
    with pytest.raises(DecodeError):
        decode(b'{"index": -1}', GpuSample)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu-01", "gpu-01"),
        ("gpu.node.1", "gpu_node_1"),
        ("a b*c>d", "a_b_c_d"),
        ("llama_8b-A", "llama_8b-A"),
        ("nœud", "n_ud"),
        ("", "_"),
    ],
)
def test_token_replaces_everything_outside_the_token_alphabet(name: str, expected: str) -> None:
    assert subjects.token(name) == expected


def test_subjects_follow_the_contract() -> None:
    assert subjects.telemetry("gpu.01") == "placewatch.telemetry.gpu_01"
    assert subjects.compute("n1", "llama 8b") == "placewatch.compute.n1.llama_8b"
    assert subjects.fallback("n1", "s", prefix="pw") == "pw.fallback.n1.s"
    assert subjects.shard_key("n.1", "s>") == "n_1.s_"
    assert subjects.STREAM_EVENTS == "PLACEWATCH_EVENTS"
    assert subjects.BUCKET_PLACEMENTS == "placewatch_placements"


def test_placement_spec_reads_the_documented_fields() -> None:
    spec = msgspec.json.decode(
        b'{"id": "llama-8b-a", "pid": 12345, "gpus": [0, 1], "min_gpu_bytes": 1024}',
        type=PlacementSpec,
    )
    assert spec.id == "llama-8b-a"
    assert spec.gpus == [0, 1]
    assert spec.match is None
    assert spec.min_gpu_bytes == 1024


def test_json_schema_names_every_message() -> None:
    schema = json_schema()
    assert {"NodeTelemetry", "ComputeStatus", "FallbackEvent", "PlacementSpec"} <= set(
        schema["$defs"]
    )
    fields = schema["$defs"]["GpuSample"]["properties"]
    for name in (
        "index",
        "uuid",
        "vendor",
        "utilization_pct",
        "activity",
        "foreign_bytes",
        "processes",
    ):
        assert name in fields
    assert set(schema["$defs"]["ComputeStatus"]["properties"]["verdict"]["enum"]) == {
        "starting", "gpu", "partial", "cpu_fallback", "misplaced", "cpu", "unknown", "gone",
    }  # fmt: skip
    assert DeviceUse.__struct_fields__ == ("index", "uuid", "used_bytes")


def test_schemas_import_msgspec_and_the_standard_library_only() -> None:
    def imported_by(module: str) -> set[str]:
        code = f"import sys, {module}; print(*sorted({{m.split('.')[0] for m in sys.modules}}))"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        return set(out.stdout.split())

    imported = imported_by("placewatch.schemas")
    # What msgspec itself pulls in (typing_extensions, on some versions) is msgspec's.
    allowed = imported_by("msgspec") | set(sys.stdlib_module_names) | {"placewatch"}
    assert {m for m in imported - allowed if not m.startswith("_")} == set()
    assert {"nats", "anyio", "psutil"}.isdisjoint(imported)
