"""Publishing a node's telemetry with the contract's headers.

Telemetry is latest-value: while the server is away a sample is not
buffered for replay (it would be stale when it arrived), it is counted, and
the next sample that goes out says how many were dropped.
"""

from __future__ import annotations

import logging

import msgspec
import nats.errors
from nats.aio.client import Client

from placewatch.schemas import NodeTelemetry, encode, subjects
from placewatch.schemas.codec import Encoding

log = logging.getLogger(__name__)


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
        payload, headers = encode(message, self.encoding)
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
