"""Publishing a node's telemetry with the contract's headers.

Telemetry is latest-value: while the server is away a sample is not
buffered for replay (it would be stale when it arrived), it is counted, and
the next sample that goes out says how many were dropped. A sample too large
for the server's max payload goes out trimmed (bus/fit.py), saying so in
`sources`, rather than never again.
"""

from __future__ import annotations

import logging

import msgspec
import nats.errors
from nats.aio.client import Client

from placewatch.schemas import NodeTelemetry, SourceStatus, encode, subjects
from placewatch.schemas.codec import Encoding

from .fit import fit

log = logging.getLogger(__name__)

NOTE_ROOM = 512
"""Bytes kept free when telemetry is trimmed, for the source status that says so."""


class Publisher:
    """Publishes a node's messages; knows its prefix and encoding."""

    def __init__(self, nc: Client, prefix: str, encoding: Encoding = "json") -> None:
        self.nc = nc
        self.prefix = prefix
        self.encoding: Encoding = encoding
        self.dropped = 0

    async def telemetry(self, message: NodeTelemetry) -> bool:
        """Publish one sample now or drop it; True when it went out."""
        if not self.nc.is_connected:
            self.dropped += 1
            return False
        if self.dropped:
            message = msgspec.structs.replace(message, dropped=self.dropped)
        fitted = fit(message, self.nc.max_payload - NOTE_ROOM, self.encoding)
        if fitted is None:
            self.dropped += 1
            log.error(
                "telemetry not published: even trimmed it is larger than the server's "
                "max_payload (%d bytes); raise max_payload in the server's configuration",
                self.nc.max_payload,
            )
            return False
        payload, headers = fitted.payload, fitted.headers
        if fitted.trimmed:
            payload, headers = encode(_noted(fitted.message, self.nc.max_payload), self.encoding)
        try:
            await self.nc.publish(
                subjects.telemetry(message.node, self.prefix), payload, headers=headers
            )
        except nats.errors.Error as exc:
            self.dropped += 1
            log.warning("telemetry not published: %s", exc)
            return False
        self.dropped = 0
        return True


def _noted(telemetry: NodeTelemetry, max_payload: int) -> NodeTelemetry:
    """Trimmed telemetry, saying in `sources` what was left out and why."""
    left_out = ", ".join(f"{n} {field}" for field, n in sorted(telemetry.omitted.items()))
    note = SourceStatus(
        name="telemetry",
        ok=False,
        error=f"trimmed to fit the server's max_payload ({max_payload} bytes): left out "
        f"{left_out}; raise max_payload, or place fewer shards on this node",
    )
    return msgspec.structs.replace(telemetry, sources=[*telemetry.sources, note])
