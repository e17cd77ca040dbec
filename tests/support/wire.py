"""The contract's messages as the wire carries them, for the tests of what docs/subjects.md
shows and of what an older reader makes of a newer message.

A field is named by its path from the message down, nested Structs included: `gpus[]` is
each entry of a list, `processes{}` each value of a map, so `gpus[].health.problems` is the
`problems` of each GPU's `health`. The paths come from msgspec's own view of a Struct
(`msgspec.inspect`), so a field added to any Struct of the contract is in them at once.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from msgspec import inspect as mi

from placewatch.schemas import SCHEMA_VERSION, NodeSample, encode, lean
from placewatch.schemas.endpoint import HOST_PATTERN, PREFIX_PATTERN

SUBJECTS_MD = Path(__file__).resolve().parents[2] / "docs" / "subjects.md"
SAMPLE = re.compile(r"<!-- sample: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)
"""A sample in docs/subjects.md: the marker naming its type, then its fenced block."""

WHEN = datetime(2026, 12, 6, 9, 30, 0, 120113, tzinfo=UTC)
S = TypeVar("S", bound=msgspec.Struct)
PATTERNS = {
    "^https?://": "http://127.0.0.1:8080/health",
    "^https?$": "https",
    HOST_PATTERN: "10.0.0.7",
    PREFIX_PATTERN: "/llm",
}
"""A valid value for each pattern a string field of the contract must match."""


def doc_samples(text: str | None = None) -> list[tuple[str, str, str]]:
    """(name, fence language, text) of every sample in docs/subjects.md."""
    return SAMPLE.findall(SUBJECTS_MD.read_text() if text is None else text)


def json_samples(name: str) -> list[str]:
    """The JSON samples docs/subjects.md shows of the message type `name`."""
    return [text for named, lang, text in doc_samples() if named == name and lang == "json"]


def _members(t: mi.Type) -> Iterator[mi.Type]:
    """The types a value of `t` may be: its Metadata unwrapped, a union split, None left out."""
    while isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        for member in t.types:
            yield from _members(member)
    elif not isinstance(t, mi.NoneType):
        yield t


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def field_paths(type_: type[msgspec.Struct]) -> set[str]:
    """The path of every field of `type_` and of every Struct under it."""
    return set(_paths_of(mi.type_info(type_), ""))


def _paths_of(t: mi.Type, prefix: str) -> Iterator[str]:
    for member in _members(t):
        if isinstance(member, mi.StructType):
            for f in member.fields:
                path = _join(prefix, f.encode_name)
                yield path
                yield from _paths_of(f.type, path)
        elif isinstance(member, mi.ListType):
            yield from _paths_of(member.item_type, prefix + "[]")
        elif isinstance(member, mi.DictType):
            yield from _paths_of(member.value_type, prefix + "{}")


def paths_in(value: object, type_: type[msgspec.Struct]) -> set[str]:
    """The paths of the fields a message, as JSON decodes it, carries."""
    return set(_carried(value, mi.type_info(type_), ""))


def _carried(value: object, t: mi.Type, prefix: str) -> Iterator[str]:
    for member in _members(t):
        if isinstance(member, mi.StructType) and isinstance(value, dict):
            for f in member.fields:
                if f.encode_name in value:
                    path = _join(prefix, f.encode_name)
                    yield path
                    yield from _carried(value[f.encode_name], f.type, path)
        elif isinstance(member, mi.ListType) and isinstance(value, list):
            for item in value:
                yield from _carried(item, member.item_type, prefix + "[]")
        elif isinstance(member, mi.DictType) and isinstance(value, dict):
            for item in value.values():
                yield from _carried(item, member.value_type, prefix + "{}")


def full(type_: type[S]) -> S:
    """A message of `type_` with every field set, in every Struct under it: each list and map
    one entry long, each field a valid value other than its default where the Struct leaves
    defaults out (`omit_defaults`), so that its encoding carries every field."""
    return msgspec.convert(_value(mi.type_info(type_), msgspec.NODEFAULT), type_)


def _value(t: mi.Type, default: Any) -> Any:
    member = next(_members(t), None)
    if member is None:
        return None
    if isinstance(member, mi.StructType):
        return {
            f.encode_name: _field_value(f, member.cls.__struct_config__.omit_defaults)
            for f in member.fields
        }
    if isinstance(member, mi.ListType):
        return [_value(member.item_type, msgspec.NODEFAULT)]
    if isinstance(member, mi.DictType):
        key = _value(member.key_type, msgspec.NODEFAULT)
        return {key: _value(member.value_type, msgspec.NODEFAULT)}
    return _scalar(member, default)


def _field_value(f: mi.Field, omit_defaults: bool) -> Any:
    keeps = not omit_defaults and f.default not in (None, msgspec.NODEFAULT)
    if f.name == "schema" or keeps:
        # The schema a message carries is the reader's (an older one is refused), and a
        # Struct that writes its defaults carries them anyway.
        return SCHEMA_VERSION if f.name == "schema" else f.default
    return _value(f.type, f.default)


def _scalar(t: mi.Type, default: Any) -> Any:
    if isinstance(t, mi.LiteralType):
        return next(v for v in sorted(t.values, key=str) if v != default)
    if isinstance(t, mi.BoolType):
        return not default if isinstance(default, bool) else True
    if isinstance(t, mi.IntType):
        low = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else 1)
        return low + 1 if low == default else low
    if isinstance(t, mi.FloatType):
        return 1.5
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            return PATTERNS[t.pattern]  # a new pattern needs a valid value in PATTERNS
        return "x"
    if isinstance(t, mi.DateTimeType):
        return WHEN
    raise TypeError(f"tests/support/wire.py makes no value of {t!r}: teach _scalar one")


def literal_paths(type_: type[msgspec.Struct]) -> list[tuple[str, frozenset[Any]]]:
    """Each field of `type_` (and of the Structs under it) whose values are a Literal's: its
    path and the values it may take."""
    return sorted(_literals(mi.type_info(type_), ""), key=lambda found: found[0])


def _literals(t: mi.Type, prefix: str) -> Iterator[tuple[str, frozenset[Any]]]:
    for member in _members(t):
        if isinstance(member, mi.StructType):
            for f in member.fields:
                path = _join(prefix, f.encode_name)
                for inner in _members(f.type):
                    if isinstance(inner, mi.LiteralType):
                        yield path, frozenset(inner.values)
                yield from _literals(f.type, path)
        elif isinstance(member, mi.ListType):
            yield from _literals(member.item_type, prefix + "[]")
        elif isinstance(member, mi.DictType):
            yield from _literals(member.value_type, prefix + "{}")


def with_value(message: dict[str, Any], path: str, value: object) -> tuple[dict[str, Any], str]:
    """A copy of `message` (as JSON decodes it) with the field at `path` set to `value` in its
    first list entry or map value, and where msgspec's errors say that field is (`$.gpus[0].vendor`)."""
    copy: dict[str, Any] = json.loads(json.dumps(message))
    node: Any = copy
    where = "$"
    steps = path.split(".")
    for i, step in enumerate(steps):
        name = step.rstrip("[]{}")
        if i == len(steps) - 1:
            node[name] = value
            return copy, f"{where}.{name}"
        node, where = node[name], f"{where}.{name}"
        for marker in re.findall(r"\[\]|\{\}", step):
            if marker == "[]":
                node, where = node[0], f"{where}[0]"
            else:
                node, where = next(iter(node.values())), f"{where}[...]"
    raise ValueError(f"an empty path: {path!r}")


def wire_blocks(sample_json: bytes) -> str:
    """`placewatch sample --json`'s output as docs/subjects.md's samples of the two messages
    the worker publishes it as (its NodeInventory and NodeTelemetry), ready to paste."""
    inventory, telemetry = lean.split(msgspec.json.decode(sample_json, type=NodeSample))
    blocks = []
    for message in (inventory, telemetry):
        text = json.dumps(json.loads(encode(message)[0]), indent=2)
        blocks.append(f"<!-- sample: {type(message).__name__} -->\n```json\n{text}\n```\n")
    return "\n".join(blocks)


if __name__ == "__main__":
    # placewatch sample --json | python -m tests.support.wire
    sys.stdout.write(wire_blocks(sys.stdin.buffer.read()))
