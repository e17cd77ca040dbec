"""An older reader decodes today's messages; a value it cannot know fails it loudly.

The old reader is tests/support/old_reader.py: the Structs of the first release of schema 2's
messages, frozen. Every message type of the contract is checked, so a type or field added
later is covered without a line here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from placewatch.schemas import (
    MESSAGE_TYPES,
    ComputeStatus,
    FallbackEvent,
    GpuSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    SourceStatus,
    decode_any,
    encode,
    lean,
)

from tests.support.old_reader import OLD_TYPES
from tests.support.wire import full, json_samples, literal_paths, with_value

NAMES = [t.__name__ for t in MESSAGE_TYPES]
LATER = "a-value-of-a-later-release"
"""A Literal value no reader of today knows, as a later release may add one."""


def old_type(type_: type[msgspec.Struct]) -> type[msgspec.Struct]:
    old = OLD_TYPES.get(type_.__name__)
    assert old is not None, (
        f"tests/support/old_reader.py has no {type_.__name__}: freeze a copy of the type as "
        "it is first published there"
    )
    return old


def known(value: Any, old: Any) -> Any:
    """`value` (as JSON decodes it) with only what the old reader's `old` (the same value as
    it decodes and encodes it) has: fields added since left out."""
    if isinstance(value, dict) and isinstance(old, dict):
        return {k: known(v, old[k]) for k, v in value.items() if k in old}
    if isinstance(value, list) and isinstance(old, list):
        return [known(v, o) for v, o in zip(value, old, strict=True)]
    return value


def payloads(type_: type[msgspec.Struct]) -> list[tuple[str, bytes]]:
    """Today's messages of `type_`: docs/subjects.md's samples and one with every field set."""
    samples = [
        (f"subjects.md {i}", text.encode()) for i, text in enumerate(json_samples(type_.__name__))
    ]
    return [*samples, ("every field", encode(full(type_))[0])]


@pytest.mark.parametrize("type_", MESSAGE_TYPES, ids=NAMES)
def test_an_old_reader_decodes_every_message_reading_what_it_knew_as_sent(
    type_: type[msgspec.Struct],
) -> None:
    old = old_type(type_)
    for where, payload in payloads(type_):
        read = msgspec.json.decode(payload, type=old)
        as_read = json.loads(msgspec.json.encode(read))
        assert as_read == known(json.loads(payload), as_read), where


@pytest.mark.parametrize("type_", MESSAGE_TYPES, ids=NAMES)
def test_an_old_reader_decodes_todays_msgpack(type_: type[msgspec.Struct]) -> None:
    message = full(type_)
    read = msgspec.msgpack.decode(encode(message, "msgpack")[0], type=old_type(type_))
    as_read = json.loads(msgspec.json.encode(read))
    assert as_read == known(json.loads(encode(message)[0]), as_read)


def unknown_values() -> list[Any]:
    """(type, field path, a value the old reader's Literal lacks) for every Literal field the
    old reader knows, in every message type: the values added since, and one of a later
    release."""
    cases = []
    for type_ in MESSAGE_TYPES:
        old = OLD_TYPES.get(type_.__name__)
        if old is None:
            continue  # test_an_old_reader_decodes_... names it
        now = dict(literal_paths(type_))
        for path, values in literal_paths(old):
            for value in [*sorted(now.get(path, frozenset()) - values), LATER]:
                cases.append(
                    pytest.param(type_, path, value, id=f"{type_.__name__}-{path}-{value}")
                )
    return cases


@pytest.mark.parametrize(("type_", "path", "value"), unknown_values())
def test_a_value_the_old_reader_cannot_know_fails_naming_the_field(
    type_: type[msgspec.Struct], path: str, value: str
) -> None:
    message = json.loads(encode(full(type_))[0])
    changed, where = with_value(message, path, value)
    with pytest.raises(msgspec.ValidationError) as failed:
        msgspec.json.decode(json.dumps(changed), type=old_type(type_))
    assert str(failed.value).endswith(f"- at `{where}`"), str(failed.value)
    assert repr(value) in str(failed.value)


def test_the_literal_cases_cover_the_vendor_backend_and_verdict() -> None:
    ids = {(p.values[0].__name__, p.values[1]) for p in unknown_values()}
    assert ("NodeInventory", "gpus[].vendor") in ids
    assert ("NodeTelemetry", "shards{}.verdict") in ids
    assert ("ComputeStatus", "backend") in ids
    assert ("FallbackEvent", "status.verdict") in ids


def intel_node() -> NodeSample:
    """A node whose worker reads an Intel GPU (vendor "intel", added after schema 2's first
    release) beside an NVIDIA one."""
    return NodeSample(
        node="gpu-09",
        session="s1",
        seq=1,
        time=datetime(2026, 12, 7, tzinfo=UTC),
        interval_s=2.0,
        gpus=[
            GpuSample(index=0, vendor="nvidia", name="NVIDIA H100 80GB HBM3"),
            GpuSample(index=1, vendor="intel", name="Intel(R) Data Center GPU Max 1550"),
        ],
        sources=[SourceStatus(name="xpu-smi", ok=True, vendor="intel")],
    )


def test_an_old_reader_refuses_an_intel_inventory_naming_the_vendor_field() -> None:
    inventory, telemetry = lean.split(intel_node())
    with pytest.raises(msgspec.ValidationError, match=r"'intel' - at `\$\.gpus\[1\]\.vendor`"):
        msgspec.json.decode(encode(inventory)[0], type=old_type(NodeInventory))
    with pytest.raises(msgspec.ValidationError, match=r"'intel' - at `\$\.sources\[0\]\.vendor`"):
        msgspec.json.decode(encode(telemetry)[0], type=old_type(NodeTelemetry))


@pytest.mark.parametrize("backend", ["SYCL", "Vulkan"])
def test_an_old_reader_refuses_a_sycl_or_vulkan_status_naming_the_backend(backend: str) -> None:
    status = ComputeStatus(
        node="gpu-09",
        shard="llama-8b",
        session="s1",
        time=datetime(2026, 12, 7, tzinfo=UTC),
        backend=backend,  # type: ignore[arg-type]
    )
    with pytest.raises(msgspec.ValidationError, match=rf"'{backend}' - at `\$\.backend`"):
        msgspec.json.decode(encode(status)[0], type=old_type(ComputeStatus))
    event = FallbackEvent(state="firing", status=status)
    with pytest.raises(msgspec.ValidationError, match=r"at `\$\.status\.backend`"):
        msgspec.json.decode(encode(event)[0], type=old_type(FallbackEvent))


def test_an_old_reader_still_reads_a_node_of_the_vendors_it_knew() -> None:
    node = intel_node()
    nvidia_only = msgspec.structs.replace(node, gpus=node.gpus[:1], sources=[])
    inventory, _ = lean.split(nvidia_only)
    read = msgspec.json.decode(encode(inventory)[0], type=old_type(NodeInventory))
    assert [g.vendor for g in read.gpus] == ["nvidia"]  # type: ignore[attr-defined]


def test_todays_reader_reads_the_intel_vendor_and_the_sycl_backend() -> None:
    inventory, telemetry = lean.split(intel_node())
    joined = lean.join(
        decode_any(*encode(inventory)),  # type: ignore[arg-type]
        decode_any(*encode(telemetry)),  # type: ignore[arg-type]
    )
    assert [g.vendor for g in joined.gpus] == ["nvidia", "intel"]
    assert [s.vendor for s in joined.sources] == ["intel"]
    status = ComputeStatus(
        node="gpu-09",
        shard="a",
        session="s1",
        time=datetime(2026, 12, 7, tzinfo=UTC),
        backend="SYCL",
    )
    assert decode_any(*encode(status)) == status
