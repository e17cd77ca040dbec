"""Every message fits the server's max payload: trimmed when it would not, never stuck.

A server refuses a message whose headers and payload together exceed its
`max_payload` (1 MiB by default, as INFO says). A status or telemetry that does
not fit would otherwise be retried for ever and hold up everything behind it.
So a message that would not fit is made smaller, one step at a time, largest
part first: its long lists are cut (a list keeps its first entries; an engine's
evidence its last) and, in telemetry, the shards' reasons emptied (each is in
the shard's ComputeStatus). What was left out is said in the message itself,
in `omitted` (field -> how many), so a reader knows it has less than all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from placewatch.schemas import ComputeStatus, FallbackEvent, NodeTelemetry, encode
from placewatch.schemas.codec import Encoding

Message = ComputeStatus | FallbackEvent | NodeTelemetry

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
        return _smaller_telemetry(message)
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


def _smaller_telemetry(telemetry: NodeTelemetry) -> Iterator[NodeTelemetry]:
    yield telemetry
    reasons = sum(1 for b in telemetry.shards if b.reason)
    if reasons:
        telemetry = msgspec.structs.replace(
            telemetry,
            shards=[msgspec.structs.replace(b, reason="") for b in telemetry.shards],
            omitted=_left_out(telemetry.omitted, "shards.reason", reasons),
        )
        yield telemetry
    while True:
        lists = {
            "gpus.processes": sum(len(g.processes) for g in telemetry.gpus),
            "shards": len(telemetry.shards),
            "sources": len(telemetry.sources),
            "gpus.mig": sum(len(g.mig) for g in telemetry.gpus),
        }
        field, length = max(lists.items(), key=lambda kv: kv[1])
        if length == 0:
            return
        telemetry = _halve(telemetry, field)
        yield telemetry


def _halve(telemetry: NodeTelemetry, field: str) -> NodeTelemetry:
    """`telemetry` with the list `field` (in every GPU, for a GPU's lists) cut to half."""
    if field.startswith("gpus."):
        inner, gpus, cut = field.removeprefix("gpus."), [], 0
        for gpu in telemetry.gpus:
            entries = getattr(gpu, inner)
            keep = len(entries) // 2
            cut += len(entries) - keep
            gpus.append(msgspec.structs.replace(gpu, **{inner: entries[:keep]}))
        return msgspec.structs.replace(
            telemetry, gpus=gpus, omitted=_left_out(telemetry.omitted, field, cut)
        )
    entries = getattr(telemetry, field)
    keep = len(entries) // 2
    return msgspec.structs.replace(
        telemetry,
        **{field: entries[:keep]},
        omitted=_left_out(telemetry.omitted, field, len(entries) - keep),
    )
