"""What `placewatch alerts --format alertmanager` follows besides its durable consumer: each
node's telemetry, whose `sources` say whether its GPU tools answer, and each node forgotten,
for the blindness alerts (blindness.py).

Core subscriptions, live only: a node's telemetry comes every interval, so what a restarted
`alerts` missed is told again within one. A message that is not what its subject says, or
names another node than its subject's, is dropped, as every reader drops it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from placewatch.schemas import (
    DecodeError,
    NodeForgotten,
    NodeTelemetry,
    decode,
    on_own_subject,
    partitions,
    subjects,
)

from .blindness import Blindness

log = logging.getLogger(__name__)

M = TypeVar("M", NodeTelemetry, NodeForgotten)


async def follow(
    nc: Client, prefix: str, blindness: Blindness, clock: Callable[[], float] = time.time
) -> list[Subscription]:
    """Subscribe to every node's telemetry and forgets, telling `blindness`; the
    subscriptions, for the caller to end."""

    async def telemetry(msg: Msg) -> None:
        t = _read(msg, NodeTelemetry)
        if t is not None:
            blindness.saw(t, clock())

    async def forgotten(msg: Msg) -> None:
        said = _read(msg, NodeForgotten)
        if said is not None:
            blindness.forget(said.node)

    return [
        await nc.subscribe(partitions.consumer_subject("telemetry", prefix), cb=telemetry),
        await nc.subscribe(subjects.all_forgotten(prefix), cb=forgotten),
    ]


def _read(msg: Msg, kind: type[M]) -> M | None:
    try:
        message = decode(msg.data, kind, msg.headers)
    except DecodeError as exc:
        log.debug("%s: not a %s (%s)", msg.subject, kind.__name__, exc)
        return None
    return message if on_own_subject(message, msg.subject) else None
