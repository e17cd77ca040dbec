"""What a control plane and the workers' own bookkeeping write: a shard's placement, the lease
that keeps one worker per node, a node forgotten; and the list of every message of the
contract (messages.py has the readings and statuses)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

import msgspec

from .endpoint import Endpoint
from .messages import (
    SCHEMA_VERSION,
    ComputeStatus,
    FallbackEvent,
    NodeInventory,
    NodeTelemetry,
    Pid,
)
from .subjects import MAX_NAME_BYTES
from .values import Time

MAX_PLACED_GPUS = 64
"""The most GPUs one placement may name."""
MAX_PATTERN_CHARS = 1024
MAX_URL_CHARS = 2048
MAX_PATH_CHARS = 4096
MAX_FLOOR_BYTES = 1 << 50
"""A `min_gpu_bytes` above this (1 PiB) is a mistake, not a floor."""

ShardId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_BYTES)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=1023)]


class PlacementSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a shard was placed: a shards file entry, or a placements bucket value.

    `gpus` are physical indices; empty means the CPU on purpose. Either `pid`
    or `match` (a pattern on the process command line) finds its process.
    """

    id: ShardId
    gpus: Annotated[list[GpuIndex], msgspec.Meta(max_length=MAX_PLACED_GPUS)] = msgspec.field(
        default_factory=list
    )
    pid: Pid | None = None
    match: Annotated[str, msgspec.Meta(max_length=MAX_PATTERN_CHARS)] | None = None
    health_url: (
        Annotated[str, msgspec.Meta(max_length=MAX_URL_CHARS, pattern="^https?://")] | None
    ) = None
    log_path: Annotated[str, msgspec.Meta(max_length=MAX_PATH_CHARS)] | None = None
    min_gpu_bytes: Annotated[int, msgspec.Meta(ge=0, le=MAX_FLOOR_BYTES)] | None = None
    engine: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    endpoint: Endpoint | None = None
    """Where the shard serves, as gateways name it; None: read from `health_url`, else from
    its engine's flags."""


LEASE_INTERVALS = 3
"""A lease not refreshed for this many of its holder's intervals has expired."""
MAX_INTERVAL_S = 86_400.0
"""The longest interval a worker may be given (a day); a lease that says more is not one."""


class NodeLease(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Which worker holds a node's name: the value of the node's key in the KV bucket
    placewatch_leases, so that two workers given one name never publish for it at once.

    Its holder refreshes it every `interval_s`. It has expired once LEASE_INTERVALS of those
    have passed since the server stored it: the entry's timestamp is the server's, so the
    holder's clock never enters into it (`started` is what the holder's host said).
    """

    schema: int = SCHEMA_VERSION
    node: str
    session: str
    host: str
    pid: Pid
    started: Time
    interval_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_INTERVAL_S)]

    def expires(self, stored: datetime) -> datetime:
        """When the lease expires, given the server's timestamp of the entry that holds it."""
        return stored + timedelta(seconds=LEASE_INTERVALS * self.interval_s)


class NodeForgotten(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A node gone for good: `placewatch forget` says so on placewatch.forgotten.<node>, in
    core NATS, once the bus keeps nothing of it, and a view holding the node lets it go."""

    schema: int = SCHEMA_VERSION
    node: str
    time: Time
    reason: str
    """Who forgot it, and why (`forgotten: placewatch forget on <host> said ...`)."""


MESSAGE_TYPES: tuple[type[msgspec.Struct], ...] = (
    NodeTelemetry,
    NodeInventory,
    ComputeStatus,
    FallbackEvent,
    PlacementSpec,
    NodeLease,
    NodeForgotten,
)
"""The top-level messages of the contract, each named in the Placewatch-Type header."""
