"""The node's micro service, as the contract: its endpoints, their replies and errors.

Each worker runs one instance of the NATS micro service `placewatch` (found
through `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`, as `nats micro ls` does),
its node in the metadata, with four endpoints under `<prefix>.service.<node>`:

- `telemetry`: the node's latest NodeTelemetry;
- `inventory`: the NodeInventory it names (for a reader that has not got it yet);
- `shards`: the latest ComputeStatus of each of its shards, a list;
- `recheck`: a tick now, answered with the statuses after it.

A request's body is ignored. A list reply is the worker's encoding of an
array of ComputeStatus, its `Placewatch-Type` `ComputeStatus[]`. An error is
NATS micro's: headers `Nats-Service-Error-Code` and `Nats-Service-Error`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from . import subjects
from .codec import (
    CONTENT_TYPES,
    HEADER_CONTENT_TYPE,
    HEADER_SCHEMA,
    HEADER_TYPE,
    DecodeError,
    Encoding,
    content_type,
)
from .messages import SCHEMA_VERSION, ComputeStatus

NAME = "placewatch"
ENDPOINTS = ("telemetry", "inventory", "shards", "recheck")
STATUS_LIST = "ComputeStatus[]"
"""The Placewatch-Type of a list of ComputeStatus, the `shards` and `recheck` replies."""

NO_SAMPLE_YET = "503"
TOO_MANY = "429"
"""A recheck refused: one runs at a time and one a second, as HTTP's Too Many Requests."""
FAILED = "500"
ERROR_CODES = {
    NO_SAMPLE_YET: "`telemetry` or `inventory` before the worker's first tick: ask again "
    "after an interval",
    TOO_MANY: "`recheck` while one runs, or within a second of the last: the description "
    "says when to ask again",
    FAILED: "`recheck` whose tick failed: the worker's log says why",
}
HEADER_ERROR_CODE = "Nats-Service-Error-Code"
HEADER_ERROR = "Nats-Service-Error"


def endpoint(node: str, name: str, prefix: str = subjects.DEFAULT_PREFIX) -> str:
    """The subject of one of a node's endpoints (`telemetry`, `inventory`, `shards`,
    `recheck`)."""
    return f"{subjects.service(node, prefix)}.{name}"


_list_json = msgspec.json.Encoder()
_list_msgpack = msgspec.msgpack.Encoder()


def encode_statuses(
    statuses: Sequence[ComputeStatus], encoding: Encoding = "json"
) -> tuple[bytes, dict[str, str]]:
    """A list reply: the statuses, and the contract's headers."""
    encoder = _list_json if encoding == "json" else _list_msgpack
    return encoder.encode(list(statuses)), {
        HEADER_CONTENT_TYPE: CONTENT_TYPES[encoding],
        HEADER_TYPE: STATUS_LIST,
        HEADER_SCHEMA: str(SCHEMA_VERSION),
    }


def decode_statuses(data: bytes, headers: Mapping[str, str] | None) -> list[ComputeStatus]:
    """A list reply read back; DecodeError when it is not one (an error reply included)."""
    headers = headers or {}
    if headers.get(HEADER_ERROR_CODE):
        raise DecodeError(
            f"the service answered with error {headers[HEADER_ERROR_CODE]}: "
            f"{headers.get(HEADER_ERROR, '')}"
        )
    kind = content_type(headers)
    try:
        if kind == CONTENT_TYPES["msgpack"]:
            return msgspec.msgpack.decode(data, type=list[ComputeStatus])
        return msgspec.json.decode(data, type=list[ComputeStatus])
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a list of ComputeStatus ({kind}): {exc}") from exc
