"""docs/subjects.md's samples show every field the wire carries.

Each message type of the contract is built with every field set (tests/support/wire.py),
encoded with the codec, and the fields its encoding carries are looked for in the samples
docs/subjects.md shows of that type (`<!-- sample: TYPE -->` and a ```json block): a field
added to a Struct fails here, naming its path, until a sample shows it.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from placewatch.schemas import (
    MESSAGE_TYPES,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    decode,
    encode,
    lean,
)

from tests.support.wire import (
    doc_samples,
    field_paths,
    full,
    json_samples,
    paths_in,
    wire_blocks,
)

NEVER_SENT: dict[str, dict[str, str]] = {
    "NodeInventory": {
        "gpus[].health.clock_events": "a reading: the telemetry's gpus[].clock_events",
    },
}
"""Fields of a message's Structs that the worker never fills in that message, and why; a
sample leaves them out (test_never_sent_is_what_the_split_leaves_out keeps this honest)."""

NAMES = [t.__name__ for t in MESSAGE_TYPES]


def wire_paths(type_: type[msgspec.Struct]) -> set[str]:
    """The field paths of a message of `type_` with every field set, as the codec encodes it."""
    payload, _ = encode(full(type_))
    return paths_in(json.loads(payload), type_)


@pytest.mark.parametrize("type_", MESSAGE_TYPES, ids=NAMES)
def test_a_full_message_carries_every_field_of_its_structs(type_: type[msgspec.Struct]) -> None:
    message = full(type_)
    payload, headers = encode(message)
    assert wire_paths(type_) == field_paths(type_)
    assert decode(payload, type_, headers) == message
    packed, packed_headers = encode(message, "msgpack")
    assert decode(packed, type_, packed_headers) == message


@pytest.mark.parametrize("type_", MESSAGE_TYPES, ids=NAMES)
def test_subjects_md_samples_show_every_field_of_the_message(type_: type[msgspec.Struct]) -> None:
    name = type_.__name__
    samples = json_samples(name)
    assert samples, f"docs/subjects.md has no `<!-- sample: {name} -->` JSON sample"
    shown = set[str]().union(*(paths_in(json.loads(text), type_) for text in samples))
    missing = sorted(wire_paths(type_) - shown - set(NEVER_SENT.get(name, {})))
    assert not missing, (
        f"docs/subjects.md's {name} samples lack {', '.join(missing)}: show each with a value "
        "a worker sends (`placewatch sample --json` on a node, or the tool's captures)"
    )
    never = sorted(shown & set(NEVER_SENT.get(name, {})))
    assert not never, f"docs/subjects.md's {name} samples show {never}, which no worker sends"


def test_never_sent_is_what_the_split_leaves_out() -> None:
    inventory, telemetry = lean.split(full(NodeSample))
    for message in (inventory, telemetry):
        type_ = type(message)
        carried = paths_in(json.loads(encode(message)[0]), type_)
        assert field_paths(type_) - carried == set(NEVER_SENT.get(type_.__name__, {}))


def test_a_sample_of_a_node_pastes_as_the_two_messages_it_is_published_as() -> None:
    sample = full(NodeSample)
    text = wire_blocks(msgspec.json.encode(sample))
    (inv_name, _, inv), (tel_name, _, tel) = doc_samples(text)
    assert (inv_name, tel_name) == ("NodeInventory", "NodeTelemetry")
    inventory, telemetry = lean.split(sample)
    assert decode(inv.encode(), NodeInventory) == inventory
    assert decode(tel.encode(), NodeTelemetry) == telemetry
