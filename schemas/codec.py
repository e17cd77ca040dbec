"""Encoding and decoding with the contract's headers.

JSON is the default so that `nats sub 'placewatch.>'` shows readable
messages; msgpack is there for fleets that want smaller frames. A reader
picks the decoder from Content-Type, and a message without one is JSON.
Encoders and decoders are made once per type and reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import msgspec

from . import subjects
from .control import MESSAGE_TYPES
from .messages import (
    SCHEMA_VERSION,
    ComputeStatus,
    FallbackEvent,
    NodeTelemetry,
)

T = TypeVar("T")

Encoding = Literal["json", "msgpack"]

JSON = "application/json"
MSGPACK = "application/msgpack"
CONTENT_TYPES: dict[Encoding, str] = {"json": JSON, "msgpack": MSGPACK}
_FORMATS = frozenset(CONTENT_TYPES.values())

HEADER_CONTENT_TYPE = "Content-Type"
HEADER_TYPE = "Placewatch-Type"
HEADER_SCHEMA = "Placewatch-Schema"
HEADER_MSG_ID = "Nats-Msg-Id"

_json_encoder = msgspec.json.Encoder()
_msgpack_encoder = msgspec.msgpack.Encoder()
_TYPES_BY_NAME: dict[str, type[msgspec.Struct]] = {t.__name__: t for t in MESSAGE_TYPES}


class DecodeError(ValueError):
    """A payload that is not the message its headers say it is."""


class SchemaError(DecodeError):
    """A message of a schema this reader does not read: newer than its own, or older than
    the oldest it reads; the message says which placewatch to upgrade."""


def encode(
    message: msgspec.Struct, encoding: Encoding = "json", msg_id: str | None = None
) -> tuple[bytes, dict[str, str]]:
    """The payload and headers for one message."""
    if encoding == "json":
        payload = _json_encoder.encode(message)
    else:
        payload = _msgpack_encoder.encode(message)
    headers = {
        HEADER_CONTENT_TYPE: CONTENT_TYPES[encoding],
        HEADER_TYPE: type(message).__name__,
        HEADER_SCHEMA: str(SCHEMA_VERSION),
    }
    if msg_id is not None:
        headers[HEADER_MSG_ID] = msg_id
    return payload, headers


def decode(data: bytes, type_: type[T], headers: Mapping[str, str] | None = None) -> T:
    """Decode a payload as `type_`, choosing the format by Content-Type (JSON when absent).

    A message of a newer schema than this reader's is refused, saying so, rather than read
    as what it may no longer mean (its Placewatch-Schema header, or the `schema` it
    carries)."""
    _check_schema(headers.get(HEADER_SCHEMA) if headers else None, type_)
    kind = content_type(headers)
    try:
        if kind == MSGPACK:
            message = _msgpack_decoder(type_).decode(data)
        else:
            message = _json_decoder(type_).decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a valid {type_.__name__} ({kind}): {exc}") from exc
    _check_schema(getattr(message, "schema", None), type_)
    return message


_CURRENT = (SCHEMA_VERSION, str(SCHEMA_VERSION))
"""This reader's schema, as a message carries it and as its header says it."""


def _check_schema(said: object, type_: type[Any]) -> None:
    if said is None or said in _CURRENT:  # the common case: every check below passes
        return
    try:
        version = int(str(said))
    except ValueError:
        raise DecodeError(
            f"a {type_.__name__} whose {HEADER_SCHEMA} is {said!r}, not a number"
        ) from None
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"a {type_.__name__} of schema {version}, newer than this reader's "
            f"{SCHEMA_VERSION}: upgrade placewatch (docs/subjects.md, Changes)"
        )
    oldest = OLDEST_READ.get(type_)
    if oldest is not None and version < oldest[0]:
        raise SchemaError(
            f"a {type_.__name__} of schema {version}, which this reader no longer reads "
            f"({oldest[1]} in schema {oldest[0]}): upgrade the placewatch that sent it "
            "(docs/subjects.md, Changes)"
        )


OLDEST_READ: dict[type[Any], tuple[int, str]] = {
    NodeTelemetry: (2, "telemetry was split into a NodeInventory and readings"),
}
"""The oldest schema of a message this reader decodes, and what changed then."""


def value_headers(data: bytes) -> dict[str, str]:
    """Headers for a KV bucket value, which travels without any: its Content-Type, told
    from its first byte (a JSON message starts with `{`, a msgpack one with a map marker)."""
    return {HEADER_CONTENT_TYPE: JSON if data.lstrip()[:1] == b"{" else MSGPACK}


def decode_any(data: bytes, headers: Mapping[str, str]) -> msgspec.Struct:
    """Decode a message of any contract type, named by its Placewatch-Type header."""
    name = headers.get(HEADER_TYPE, "")
    type_ = _TYPES_BY_NAME.get(name)
    if type_ is None:
        raise DecodeError(
            f"unknown {HEADER_TYPE} {name!r}: expected one of {', '.join(_TYPES_BY_NAME)}"
        )
    return decode(data, type_, headers)


def on_own_subject(message: msgspec.Struct, subject: str) -> bool:
    """Whether `message` names the node (and, of a status or fallback event, the shard) of
    the subject or bucket key it came on (subjects.carries). A node may publish on its own
    subjects only, with any content; a message on them that names another node is a node
    speaking for another, which a reader refuses (docs/subjects.md, One node, one name)."""
    return subjects.carries(subject, *about(message))


def about(message: msgspec.Struct) -> tuple[str, str | None]:
    """The node a message is about, and the shard of a status or fallback event (None for
    any other); a message of no node names "", which no subject carries."""
    if isinstance(message, FallbackEvent):
        message = message.status
    if isinstance(message, ComputeStatus):
        return message.node, message.shard
    node = getattr(message, "node", None)
    return (node if isinstance(node, str) else ""), None


def why_refused(message: msgspec.Struct, subject: str) -> str:
    """Why a reader refuses a message that `subject` does not carry (on_own_subject), in
    words: it names another node (or shard) than its subject's, or its subject has tokens
    the contract does not give it."""
    node, shard = about(message)
    named = f"node {node!r}" if shard is None else f"shard {shard!r} of node {node!r}"
    own = [subjects.token(node)] if shard is None else [subjects.token(node), subjects.token(shard)]
    if node and shard != "" and subject.split(".")[-len(own) :] == own:
        return (
            f"it names {named}, but its subject is not one the contract gives it (a token "
            "more or less than the contract's: whoever publishes there adds tokens to a "
            "subject of its own); docs/subjects.md, One node, one name"
        )
    return (
        f"it names {named}, not its subject's; whoever publishes there speaks for another "
        "node (docs/subjects.md, One node, one name)"
    )


def content_type(headers: Mapping[str, str] | None) -> str:
    """The payload's format as its Content-Type says (JSON when it says nothing)."""
    if not headers:
        return JSON
    value = headers.get(HEADER_CONTENT_TYPE, JSON)
    if value in _FORMATS:  # the common case: as encode() writes it
        return value
    return value.split(";", 1)[0].strip().lower() or JSON


_json_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_msgpack_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


def _json_decoder(type_: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _json_decoders.get(type_)
    if decoder is None:
        decoder = _json_decoders[type_] = msgspec.json.Decoder(type_)
    return decoder


def _msgpack_decoder(type_: type[T]) -> msgspec.msgpack.Decoder[T]:
    decoder = _msgpack_decoders.get(type_)
    if decoder is None:
        decoder = _msgpack_decoders[type_] = msgspec.msgpack.Decoder(type_)
    return decoder


def json_schema() -> dict[str, Any]:
    """The JSON Schema of every message of the contract, with shared definitions. The root
    takes any message (`anyOf`): the types share fields and no definition forbids others, so a
    ComputeStatus is also a valid NodeForgotten and `oneOf` would refuse it. Which type a
    message is, its subject says (docs/subjects.md); validate against `$defs/<type>` to check
    one."""
    refs, components = msgspec.json.schema_components(MESSAGE_TYPES, ref_template="#/$defs/{name}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "placewatch messages",
        "description": f"Wire contract, schema version {SCHEMA_VERSION}: any message of it; "
        "its subject says which type it is, whose definition in $defs checks it.",
        "anyOf": list(refs),
        "$defs": components,
    }
