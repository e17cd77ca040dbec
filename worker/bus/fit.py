"""Every message fits the server's max payload: trimmed when it would not, never stuck.

A server refuses a message whose headers and payload together exceed its
`max_payload` (1 MiB by default, as INFO says). A status or telemetry that does
not fit would otherwise be retried for ever and hold up everything behind it.
So a message that would not fit is made smaller, one step at a time, largest
part first: its long lists and maps are cut (a list keeps its first entries;
an engine's evidence its last). What was left out is said in the message
itself, in `omitted` (field -> how many), so a reader knows it has less than
all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from placewatch.schemas import ComputeStatus, FallbackEvent, NodeInventory, NodeTelemetry, encode
from placewatch.schemas.codec import Encoding

Message = ComputeStatus | FallbackEvent | NodeTelemetry | NodeInventory

REASON_KEPT = 400
"""Characters of a status's reason kept when it is cut, enough for what was seen and what to do."""
_HEADER_LINE = len(b"NATS/1.0\r\n") + len(b"\r\n")


@dataclass(frozen=True)
class Fitted:
    """A message as it goes out: possibly trimmed, encoded, with its headers."""

    message: Any
    payload: bytes
    headers: dict[str, str]

    @property
    def omitted(self) -> dict[str, int]:
        """What trimming left out (nothing when it fitted whole)."""
        message = self.message
        if isinstance(message, FallbackEvent):
            return message.status.omitted
        return dict(message.omitted)

    @property
    def trimmed(self) -> bool:
        return bool(self.omitted)


def size(payload: bytes, headers: dict[str, str]) -> int:
    """What the server counts against max_payload: the header block and the payload."""
    return len(payload) + _HEADER_LINE + sum(len(k) + len(v) + 4 for k, v in headers.items())


def fit(
    message: Message, limit: int, encoding: Encoding = "json", msg_id: str | None = None
) -> Fitted | None:
    """`message` encoded within `limit` bytes, trimmed if it must be; None when even the
    smallest it can be made does not fit (a server whose max_payload is absurdly small)."""
    for candidate in _smaller(message):
        payload, headers = encode(candidate, encoding, msg_id)
        if size(payload, headers) <= limit:
            return Fitted(candidate, payload, headers)
    return None


def _smaller(message: Message) -> Iterator[Any]:
    """The message, then smaller and smaller versions of it."""
    if isinstance(message, NodeTelemetry):
        return _smaller_whole(
            message, ("gpus.processes", "shards", "sources", "gpus.mig_used_bytes")
        )
    if isinstance(message, NodeInventory):
        return _smaller_whole(message, ("processes", "gpus.mig"))
    if isinstance(message, FallbackEvent):
        return (msgspec.structs.replace(message, status=s) for s in _smaller_status(message.status))
    return _smaller_status(message)


def _left_out(omitted: dict[str, int], field: str, n: int) -> dict[str, int]:
    return {**omitted, field: omitted.get(field, 0) + n} if n else omitted


def _smaller_status(status: ComputeStatus) -> Iterator[ComputeStatus]:
    yield status
    while True:
        lists = {
            "evidence": len(status.evidence),
            "devices": len(status.devices),
            "placed_gpus": len(status.placed_gpus),
        }
        field, length = max(lists.items(), key=lambda kv: kv[1])
        if length == 0:
            break
        keep = length // 2
        if field == "evidence":
            value: list[Any] = status.evidence[length - keep :]  # the newest lines say most
        else:
            value = list(getattr(status, field))[:keep]
        status = msgspec.structs.replace(
            status, **{field: value}, omitted=_left_out(status.omitted, field, length - keep)
        )
        yield status
    if len(status.reason) > REASON_KEPT:
        cut = len(status.reason) - REASON_KEPT
        yield msgspec.structs.replace(
            status,
            reason=status.reason[: REASON_KEPT - 1] + "…",
            omitted=_left_out(status.omitted, "reason", cut + 1),
        )


Whole = NodeTelemetry | NodeInventory


def _smaller_whole(message: Whole, fields: tuple[str, ...]) -> Iterator[Whole]:
    """The message, then with its longest list or map (of `fields`) halved, and again."""
    yield message
    while True:
        lengths = {field: _length(message, field) for field in fields}
        field, length = max(lengths.items(), key=lambda kv: kv[1])
        if length == 0:
            return
        message = _halve(message, field)
        yield message


def _length(message: Whole, field: str) -> int:
    if field.startswith("gpus."):
        inner = field.removeprefix("gpus.")
        return sum(len(getattr(g, inner)) for g in message.gpus)
    return len(getattr(message, field))


def _half(entries: Any) -> tuple[Any, int]:
    """The first half of a list or a map, and how many entries that leaves out."""
    keep = len(entries) // 2
    if isinstance(entries, dict):
        return dict(list(entries.items())[:keep]), len(entries) - keep
    return entries[:keep], len(entries) - keep


def _halve(message: Whole, field: str) -> Whole:
    """`message` with the list or map `field` (in every GPU, for a GPU's) cut to half."""
    if field.startswith("gpus."):
        inner, gpus, cut = field.removeprefix("gpus."), [], 0
        for gpu in message.gpus:
            kept, left_out = _half(getattr(gpu, inner))
            cut += left_out
            gpus.append(msgspec.structs.replace(gpu, **{inner: kept}))
        return msgspec.structs.replace(
            message, gpus=gpus, omitted=_left_out(message.omitted, field, cut)
        )
    kept, left_out = _half(getattr(message, field))
    return msgspec.structs.replace(
        message, **{field: kept}, omitted=_left_out(message.omitted, field, left_out)
    )
