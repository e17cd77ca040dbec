"""A node's messages as a view holds them at fleet scale: the bytes they came in, checked on
arrival and decoded when asked for, so that 50,000 held nodes are a few KiB each in objects
the garbage collector need not walk (bench/fleet_memory.py measures both ways: what a node
costs held as bytes and held decoded, and a full collection with each).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TypeVar

import msgspec

from placewatch.schemas import ComputeStatus, NodeInventory, NodeSample, NodeTelemetry, decode, lean
from placewatch.schemas.codec import HEADER_CONTENT_TYPE

Whole = TypeVar("Whole", bound=msgspec.Struct)
"""A message, or a few of its fields (a Struct of those alone decodes faster)."""


class Held(msgspec.Struct, frozen=True, gc=False):
    """A node's latest telemetry or inventory as it came: its time (on the node's clock), the
    inventory it names (or is), its payload, decoded when asked for, and when the view took
    it (`seen`, seconds since the epoch on the view's clock: its arrival, or when the server
    stored a copy read from a stream), and, of telemetry, the session and seq it came in.

    An inventory's payload is held zlib-compressed (`compressed`): it is mostly the same
    process names over and over (6.4 KB of JSON for 8 GPUs and 64 processes, 0.7 KB
    compressed), changes rarely and is read rarely, so compressing it when it changes and
    reading it back cost little beside what it saves."""

    time: datetime
    inventory: str
    data: bytes
    content_type: str | None
    compressed: bool = False
    seen: float = 0.0
    session: str = ""
    seq: int = 0

    @property
    def clock_offset_s(self) -> float:
        """The node's clock minus the view's (bus latency included): how far the node's clock
        is off, where it says more than a few milliseconds."""
        return self.time.timestamp() - self.seen


class Holdings(msgspec.Struct, frozen=True, gc=False):
    """Each node's latest telemetry and inventory as a view held them at one moment: copies
    of its dicts, whose Held values never change, so another thread (an HTTP server's)
    may read them while the view goes on taking messages on the event loop."""

    nodes: dict[str, Held]
    inventories: dict[str, Held]
    statuses: dict[str, list[ComputeStatus]] = msgspec.field(default_factory=dict)
    """Node -> its shards' latest statuses, where asked for (FleetState.holdings)."""

    def telemetry(self, node: str) -> NodeTelemetry | None:
        return decoded(self.nodes.get(node), NodeTelemetry)

    def inventory(self, node: str) -> NodeInventory | None:
        return decoded(self.inventories.get(node), NodeInventory)

    def sample(self, node: str) -> NodeSample | None:
        """The node's telemetry joined with the inventory it names (no statuses: pids and
        reasons empty); None until both are held."""
        return join(self.nodes.get(node), self.inventories.get(node))


def content_type(headers: Mapping[str, str] | None) -> str | None:
    return None if headers is None else headers.get(HEADER_CONTENT_TYPE)


def join(
    held: Held | None,
    inventory: Held | None,
    status_of: Callable[[str], ComputeStatus | None] = lambda _: None,
) -> NodeSample | None:
    """The telemetry joined with the inventory it names and its shards' statuses (pids and
    reasons); None until both are held."""
    if held is None or inventory is None or held.inventory != inventory.inventory:
        return None
    telemetry = decode_held(held, NodeTelemetry)
    statuses = {
        shard: status for shard in telemetry.shards if (status := status_of(shard)) is not None
    }
    return lean.join(decode_held(inventory, NodeInventory), telemetry, statuses)


def decoded(held: Held | None, type_: type[Whole]) -> Whole | None:
    return None if held is None else decode_held(held, type_)


def decode_held(held: Held, type_: type[Whole]) -> Whole:
    """A held message decoded; it was checked when it came."""
    headers = None if held.content_type is None else {HEADER_CONTENT_TYPE: held.content_type}
    data = zlib.decompress(held.data) if held.compressed else held.data
    return decode(data, type_, headers)
