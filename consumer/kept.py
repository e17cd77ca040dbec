"""What the bus keeps of the fleet, read once (a view's fill): the last message of each subject
of the inventory and telemetry streams, and every shard's status in the compute bucket.

Each kept message is handed to `hold` (the view's, which judges it against what it took live,
by when the server stored it); a store that cannot be read is None in what the read returns,
and logged: the view then follows live messages only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from placewatch.retained import kv_headers, last_per_subject, stored_at
from placewatch.schemas import (
    ComputeStatus,
    FallbackEvent,
    NodeForgotten,
    NodeInventory,
    NodeTelemetry,
    subjects,
)
from placewatch.schemas.streams import StreamsAndBuckets, consumers_refused

from .snapshot import ShardKey

log = logging.getLogger(__name__)

Message = NodeTelemetry | NodeInventory | ComputeStatus | FallbackEvent | NodeForgotten
Hold = Callable[[bytes, Mapping[str, str], type[Message], str, float], Message | None]
"""Take a copy read from a store: its data, headers, type, subject and when the server stored
it; the message (taken or older than what the view holds), or None where it is not one the
view may hold (unreadable, another node's, forgotten, not wanted)."""


class Kept(NamedTuple):
    """What a fill found the bus keeps (None: a read failed): the nodes of which it keeps an
    inventory or telemetry, and the statuses."""

    nodes: set[str] | None
    statuses: set[ShardKey] | None


async def read_kept(
    nc: Client,
    stores: StreamsAndBuckets,
    followed: tuple[tuple[str, ...], tuple[str, ...]],
    hold: Hold,
    deadline: float,
) -> Kept:
    """Hand `hold` what the stores keep of the `followed` inventory and telemetry subjects,
    and every status, by `deadline` (time.monotonic()); what they keep."""
    inventory, telemetry = followed
    compute = stores.compute

    async def take(stream: str, subject: str, kind: type[Message]) -> list[Message] | None:
        msgs = await _latest(nc, stream, subject, deadline)
        if msgs is None:
            return None
        kept: list[Message] = []
        for msg in msgs:
            headers: Mapping[str, str] = msg.headers or {}
            if headers.get(subjects.KV_OPERATION) in subjects.KV_DELETED:
                continue
            if kind is ComputeStatus:
                headers = kv_headers(msg.data, headers)
            message = hold(msg.data, headers, kind, msg.subject, stored_at(msg))
            if message is not None:
                kept.append(message)
        return kept

    async def take_each(
        stream: str, of: tuple[str, ...], kind: type[Message]
    ) -> list[Message] | None:
        kept: list[Message] = []
        for subject in of:
            taken = await take(stream, subject, kind)
            if taken is None:
                return None
            kept += taken
        return kept

    inventories = await take_each(stores.inventory.name, inventory, NodeInventory)
    telemetries = await take_each(stores.telemetry.name, telemetry, NodeTelemetry)
    statuses = await take(compute.stream, subjects.kv_subject(compute.name), ComputeStatus)
    nodes = None
    if inventories is not None and telemetries is not None:
        nodes = {node_of(m) for m in (*inventories, *telemetries)}
    keys = None
    if statuses is not None:
        keys = {(s.node, s.shard) for s in statuses if isinstance(s, ComputeStatus)}
    return Kept(nodes, keys)


def node_of(message: Message) -> str:
    return message.status.node if isinstance(message, FallbackEvent) else message.node


async def _latest(nc: Client, stream: str, subject: str, deadline: float) -> list[Msg] | None:
    """The last message of each subject in `stream`; None when it cannot be read."""
    try:
        return await last_per_subject(nc, stream, subject, max(deadline - time.monotonic(), 0.1))
    except (nats.errors.Error, TimeoutError) as exc:
        why = consumers_refused(exc, stream) or exc
        log.warning("cannot read %s (%s); following live messages only", stream, why)
        return None
