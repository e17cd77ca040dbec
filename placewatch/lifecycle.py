"""How every placewatch process stops: SIGTERM or SIGINT cancels its task group, and its
connection is drained within a few seconds, so nothing it published is left in a buffer."""

from __future__ import annotations

import contextlib
import logging
import signal

import anyio
import nats.errors
from anyio.abc import TaskStatus
from nats.aio.client import Client

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 1.0


async def stop_on_signal(
    scope: anyio.CancelScope,
    what: str = "stopping",
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Cancel `scope` at the first SIGTERM or SIGINT, saying so; started (`tg.start`) once
    the signals are caught."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            log.info("%s: %s", signal.Signals(signum).name, what)
            scope.cancel()
            return


async def drain(nc: Client | None) -> None:
    """Drain the connection (flush what is buffered, then close), even while cancelled.

    nats-py refuses to drain a connection while it reconnects: there is no server to flush
    to, so it is closed instead. That close writes what it buffered to the lost socket and
    raises, with the connection already marked closed.

    A drain that outlasts DRAIN_TIMEOUT_S is cancelled where it stands, which may be inside
    the flush that waits for the server's PONG (nats-py 2.16): the connection is then
    closed at once, so that its read loop stops before that PONG finds the flush's future
    cancelled and logs a traceback (`InvalidStateError` in `_process_pong`)."""
    if nc is None or nc.is_closed:
        return
    with anyio.move_on_after(DRAIN_TIMEOUT_S, shield=True):
        try:
            await nc.drain()
        except nats.errors.ConnectionReconnectingError:
            with contextlib.suppress(OSError):
                await nc.close()
    if not nc.is_closed:
        log.warning("the connection did not drain within %g s; closed it", DRAIN_TIMEOUT_S)
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True), contextlib.suppress(OSError):
            await nc.close()
