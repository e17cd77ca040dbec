"""Encoding with the contract's headers, decoding by Content-Type, and the JSON Schema."""

from __future__ import annotations

import json
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
    NodeSample,
    NodeTelemetry,
    ShardBrief,
    SourceStatus,
    decode,
    decode_any,
    encode,
    json_schema,
    lean,
    value_headers,
)

WHEN = datetime(2026, 11, 30, 5, 0, 0, 123456, tzinfo=UTC)


def telemetry() -> NodeTelemetry:
    return lean.split(sample())[1]


def sample() -> NodeSample:
    return NodeSample(
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
    assert headers == {
        "Content-Type": f"application/{encoding}",
        "Placewatch-Type": "NodeTelemetry",
        "Placewatch-Schema": str(SCHEMA_VERSION),
    }
    assert decode(payload, NodeTelemetry, headers) == telemetry()


def test_json_is_readable_with_rfc3339_utc_times_and_exact_bytes() -> None:
    payload, _ = encode(telemetry())
    doc = json.loads(payload)
    assert doc["time"] == "2026-11-30T05:00:00.123456Z"
    assert doc["gpus"][0] == {
        "index": 0,
        "utilization_pct": 37,
        "activity": "busy",
        "memory_used_bytes": 42949672960,
        "processes": {"4242": 40802189312},
    }  # a reading no tool gave is left out: temperature_c is null
    assert doc["schema"] == SCHEMA_VERSION
    assert doc["shards"] == {"llama-a": {"verdict": "gpu"}}


def test_event_carries_message_id() -> None:
    event = FallbackEvent(state="firing", status=status())
    payload, headers = encode(event, msg_id="gpu-01.llama-a.abc123.1")
    assert headers["Nats-Msg-Id"] == "gpu-01.llama-a.abc123.1"
    assert headers["Placewatch-Type"] == "FallbackEvent"
    decoded = decode_any(payload, headers)
    assert isinstance(decoded, FallbackEvent)
    assert decoded.status.verdict == "cpu_fallback"
    assert decoded.status.placed_gpus == [1]


def test_decode_any_reads_msgpack_by_its_content_type() -> None:
    payload, headers = encode(status(), "msgpack")
    assert decode_any(payload, headers) == status()


def test_missing_content_type_means_json() -> None:
    payload = msgspec.json.encode(status())
    assert decode(payload, ComputeStatus, {}) == status()
    assert decode(payload, ComputeStatus, None) == status()
    assert (
        decode(payload, ComputeStatus, {"Content-Type": "application/json; charset=utf-8"})
        == status()
    )


def test_content_type_is_read_without_case_or_parameters() -> None:
    payload = msgspec.msgpack.encode(status())
    headers = {"Content-Type": " Application/MsgPack ; v=1"}
    assert decode(payload, ComputeStatus, headers) == status()


def test_bad_payload_names_the_type() -> None:
    with pytest.raises(DecodeError, match=r"not a valid NodeTelemetry \(application/json\)"):
        decode(b'{"node": 5}', NodeTelemetry)
    with pytest.raises(DecodeError, match=r"not a valid ComputeStatus \(application/msgpack\)"):
        decode(b"\xc1", ComputeStatus, {"Content-Type": "application/msgpack"})
    with pytest.raises(DecodeError, match="unknown Placewatch-Type 'Nope'"):
        decode_any(b"{}", {"Placewatch-Type": "Nope"})


def test_an_unknown_type_lists_the_ones_there_are() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_any(b"{}", {})
    assert str(caught.value) == (
        "unknown Placewatch-Type '': expected one of "
        "NodeTelemetry, NodeInventory, ComputeStatus, FallbackEvent, PlacementSpec, NodeLease, "
        "NodeForgotten"
    )


def test_out_of_range_values_are_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="not a valid GpuSample"):
        decode(b'{"index": 0, "utilization_pct": 140}', GpuSample)


def test_a_kv_value_is_told_json_or_msgpack_by_its_first_byte() -> None:
    as_json, _ = encode(status())
    as_msgpack, _ = encode(status(), "msgpack")
    assert value_headers(as_json) == {"Content-Type": "application/json"}
    assert value_headers(b'  \n{"node": "n"}') == {"Content-Type": "application/json"}
    assert value_headers(as_msgpack) == {"Content-Type": "application/msgpack"}
    assert decode(as_msgpack, ComputeStatus, value_headers(as_msgpack)) == status()


def test_json_schema_names_every_message() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["anyOf"] == [
        {"$ref": f"#/$defs/{name}"}
        for name in (
            "NodeTelemetry",
            "NodeInventory",
            "ComputeStatus",
            "FallbackEvent",
            "PlacementSpec",
            "NodeLease",
            "NodeForgotten",
        )
    ]
    readings = schema["$defs"]["GpuReading"]["properties"]
    for name in ("index", "utilization_pct", "activity", "foreign_bytes", "processes"):
        assert name in readings
    identity = schema["$defs"]["GpuInfo"]["properties"]
    for name in ("index", "uuid", "vendor", "memory_total_bytes", "mig"):
        assert name in identity
    assert set(schema["$defs"]["ComputeStatus"]["properties"]["verdict"]["enum"]) == {
        "starting", "gpu", "partial", "cpu_fallback", "misplaced", "cpu", "unknown", "gone",
    }  # fmt: skip
    assert list(schema["$defs"]["DeviceUse"]["properties"]) == list(DeviceUse.__struct_fields__)
    assert DeviceUse.__struct_fields__ == ("index", "uuid", "used_bytes")


def test_a_message_of_a_newer_schema_is_refused_saying_so() -> None:
    payload, headers = encode(
        ComputeStatus(node="n1", shard="a", session="s", time=datetime(2026, 12, 1, tzinfo=UTC))
    )
    with pytest.raises(DecodeError) as caught:
        decode(payload, ComputeStatus, {**headers, "Placewatch-Schema": "3"})
    assert str(caught.value) == (
        "a ComputeStatus of schema 3, newer than this reader's 2: upgrade placewatch "
        "(docs/subjects.md, Changes)"
    )
    # A value without headers (a KV entry) carries its schema in the payload.
    newer = payload.replace(b'"schema":2', b'"schema":3')
    with pytest.raises(DecodeError, match="of schema 3, newer than this reader's 2"):
        decode(newer, ComputeStatus)
    with pytest.raises(DecodeError, match="whose Placewatch-Schema is 'two', not a number"):
        decode(payload, ComputeStatus, {**headers, "Placewatch-Schema": "two"})


def test_a_message_of_the_first_schema_is_still_read() -> None:
    old = (
        b'{"schema":1,"node":"gpu_1","shard":"a_b","session":"s","time":"2026-11-30T06:00:00Z",'
        b'"verdict":"gpu"}'
    )
    status = decode(old, ComputeStatus, {"Placewatch-Schema": "1"})
    assert (status.schema, status.node, status.verdict, status.stale) == (1, "gpu_1", "gpu", False)


def test_a_compute_status_validates_against_the_root_schema() -> None:
    """A ComputeStatus is also a valid NodeForgotten (no definition forbids other fields), so a
    root `oneOf` refused every one of them."""
    import jsonschema

    message = json.loads(encode(status())[0])
    validator = jsonschema.Draft202012Validator(
        json_schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    assert list(validator.iter_errors(message)) == []
    assert list(validator.iter_errors({"node": 3})) != []
