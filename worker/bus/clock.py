"""How far this node's clock is off the NATS servers': from the time a server says it is.

A stream's info answer carries the server's time (`ts`, nats-server 2.10 and later). Asked
once, with this node's clock read before and after, it gives this node's offset to within
half the round trip. The lease is judged by it (lease.py), and `placewatch doctor` checks
it: a node whose clock is off stamps every message with a wrong time. Consumers age
messages by their arrival, so they are not misled, but people reading the times are.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
from nats.aio.client import Client

CLOCK_OFF_S = 2.0
"""A node clock further off the server's than this is said (`placewatch watch` and the
exporter's PlacewatchNodeClockOff name the same)."""
JS_API = "$JS.API"
"""The JetStream API's subjects, as the worker's `nc.jetstream()` (no domain) asks them."""
ASK_TIMEOUT_S = 2.0


class _ServerTime(msgspec.Struct):
    ts: datetime | None = None
    """The server's time as it answered (StreamInfo, nats-server 2.10 and later)."""


def now_utc() -> datetime:
    return datetime.now(UTC)


async def clock_offset(
    nc: Client, stream: str, clock: Callable[[], datetime] = now_utc
) -> float | None:
    """The server's clock minus this node's `clock`, in seconds, from the time the server
    gives in `stream`'s info; None where it gives none (no such stream, a server before
    2.10). Raises nats-py's errors and TimeoutError as a request does."""
    before = clock()
    reply = await nc.request(f"{JS_API}.STREAM.INFO.{stream}", b"", timeout=ASK_TIMEOUT_S)
    after = clock()
    try:
        ts = msgspec.json.decode(reply.data, type=_ServerTime).ts
    except msgspec.DecodeError:
        return None
    return None if ts is None else (ts - (before + (after - before) / 2)).total_seconds()


def describe(offset_s: float) -> str:
    """`60.0 s behind the NATS server's` for an offset from clock_offset."""
    return f"{abs(offset_s):.1f} s {'behind' if offset_s > 0 else 'ahead of'} the NATS server's"
