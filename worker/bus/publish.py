"""Publishing a node's inventory and telemetry with the contract's headers.

Telemetry is latest-value: while the server is away a sample is not
buffered for replay (it would be stale when it arrived), it is counted, and
the next sample that goes out says how many were dropped. A sample too large
for the server's max payload goes out trimmed (bus/fit.py), saying so in
`sources`, rather than never again.

The inventory goes out when the worker starts, whenever it changes, and again every
INVENTORY_REFRESH_S, so that a stream that lost it (a server without file storage) or a
reader with no stream at all has it again within minutes; a reader that cannot wait asks
the node's `inventory` endpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec
import nats.errors
from nats.aio.client import Client

from placewatch.schemas import NodeInventory, NodeTelemetry, SourceStatus, encode, subjects
from placewatch.schemas.codec import Encoding

from .fit import fit, size

log = logging.getLogger(__name__)

NOTE_ROOM = 512
"""Bytes kept free when telemetry is trimmed, for the source status that says so."""
INVENTORY_REFRESH_S = 600.0


class Publisher:
    """Publishes a node's messages; knows its prefix and encoding."""

    def __init__(
        self,
        nc: Client,
        prefix: str,
        encoding: Encoding = "json",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nc = nc
        self.prefix = prefix
        self.encoding: Encoding = encoding
        self.clock = clock
        self.dropped = 0
        self.inventory_sent: tuple[str, float] | None = None
        """The id of the inventory last published, and when."""

    def inventory_again(self) -> None:
        """The bus may have lost the inventory (its stores made again, the node's lease
        removed): the next `inventory` publishes it whatever was sent before."""
        self.inventory_sent = None

    async def inventory(self, message: NodeInventory) -> bool:
        """Publish the inventory if it changed, or was last sent INVENTORY_REFRESH_S ago;
        True when it is out (now or before)."""
        now = self.clock()
        sent = self.inventory_sent
        if sent is not None and sent[0] == message.id and now - sent[1] < INVENTORY_REFRESH_S:
            return True
        if not self.nc.is_connected:
            return False
        fitted = fit(message, self.nc.max_payload, self.encoding)
        if fitted is None:
            log.error(
                "inventory not published: even trimmed it is larger than the server's "
                "max_payload (%d bytes); raise max_payload in the server's configuration",
                self.nc.max_payload,
            )
            return False
        try:
            await self.nc.publish(
                subjects.inventory(message.node, self.prefix),
                fitted.payload,
                headers=fitted.headers,
            )
        except nats.errors.Error as exc:
            log.warning("inventory not published: %s", exc)
            return False
        self.inventory_sent = (message.id, now)
        return True

    async def telemetry(self, message: NodeTelemetry) -> bool:
        """Publish one sample now or drop it; True when it went out."""
        if not self.nc.is_connected:
            self.dropped += 1
            return False
        if self.dropped:
            message = msgspec.structs.replace(message, dropped=self.dropped)
        limit = self.nc.max_payload - NOTE_ROOM
        payload, headers = encode(message, self.encoding)
        if size(payload, headers) > limit:  # rare: trimmed to fit, and saying so
            fitted = fit(message, limit, self.encoding)
            if fitted is None:
                self.dropped += 1
                log.error(
                    "telemetry not published: even trimmed it is larger than the server's "
                    "max_payload (%d bytes); raise max_payload in the server's configuration",
                    self.nc.max_payload,
                )
                return False
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
