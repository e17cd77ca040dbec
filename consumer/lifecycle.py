"""How every placewatch process stops: SIGTERM or SIGINT cancels its task group, and its
connection is drained within a few seconds, so nothing it published is left in a buffer."""

from __future__ import annotations

import contextlib
import logging
import signal

import anyio
import nats.errors
from nats.aio.client import Client

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 2.0


async def stop_on_signal(scope: anyio.CancelScope, what: str = "stopping") -> None:
    """Cancel `scope` at the first SIGTERM or SIGINT, saying so."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: %s", signal.Signals(signum).name, what)
            scope.cancel()
            return


async def drain(nc: Client | None) -> None:
    """Drain the connection (flush what is buffered, then close), even while cancelled.

    nats-py refuses to drain a connection while it reconnects: there is no server to flush
    to, so it is closed instead. That close writes what it buffered to the lost socket and
    raises, with the connection already marked closed."""
    with anyio.move_on_after(DRAIN_TIMEOUT_S, shield=True):
        if nc is None or nc.is_closed:
            return
        try:
            await nc.drain()
        except nats.errors.ConnectionReconnectingError:
            with contextlib.suppress(OSError):
                await nc.close()
