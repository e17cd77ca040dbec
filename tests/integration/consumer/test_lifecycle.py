"""How a placewatch process stops: a signal cancels its task group, and what it published is
flushed on the way out, even while cancelled, even with the server gone."""

from __future__ import annotations

import logging
import os
import signal

import anyio
import nats
import pytest

from placewatch.connection import connect
from placewatch.lifecycle import DRAIN_TIMEOUT_S, drain, stop_on_signal

from tests.conftest import NatsServer
from tests.support.eventually import eventually_async
from tests.support.natsproto import RawSubscriber


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_scope_and_says_so(
    signum: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="placewatch.lifecycle")
    before = signal.getsignal(signum)

    async def main() -> bool:
        # The event loop has a SIGINT handler of its own: wait for the receiver's to replace it.
        loops = signal.getsignal(signum)
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, tg.cancel_scope, "stopping the test")
            # Only once its handler is in place may the signal be sent: this process is pytest.
            await eventually_async(lambda: signal.getsignal(signum) is not loops)
            os.kill(os.getpid(), signum)
            await anyio.sleep_forever()
        return tg.cancel_scope.cancel_called

    assert anyio.run(main, backend="asyncio") is True
    assert [r.getMessage() for r in caplog.records] == [f"{signum.name}: stopping the test"]
    assert signal.getsignal(signum) is before


def test_drain_flushes_what_was_published_even_while_cancelled(nats_server: NatsServer) -> None:
    with RawSubscriber(nats_server.url, "lifecycle.>") as sub:

        async def main() -> bool:
            nc = await nats.connect(nats_server.url)
            await nc.publish("lifecycle.last", b"said before stopping")
            with anyio.CancelScope() as scope:
                scope.cancel()
                await drain(nc)
            return nc.is_closed

        assert anyio.run(main, backend="asyncio") is True
        msg = sub.next(timeout=5)
    assert (msg.subject, msg.payload) == ("lifecycle.last", b"said before stopping")


def test_drain_returns_when_the_server_is_gone(nats_server: NatsServer) -> None:
    async def main() -> None:
        nc = await connect([nats_server.url], "test")
        await anyio.to_thread.run_sync(nats_server.stop)
        await eventually_async(lambda: not nc.is_connected)
        await nc.publish("lifecycle.lost", b"buffered for a server that is not coming back")
        # A hang would fail here; the drain itself gives up after DRAIN_TIMEOUT_S.
        with anyio.fail_after(DRAIN_TIMEOUT_S + 10):
            await drain(nc)
        assert nc.is_closed

    anyio.run(main, backend="asyncio")


def test_drain_without_a_connection_returns() -> None:
    async def main() -> None:
        await drain(None)

    anyio.run(main, backend="asyncio")


def test_drain_of_a_closed_connection_leaves_it_closed(nats_server: NatsServer) -> None:
    async def main() -> bool:
        nc = await nats.connect(nats_server.url)
        await nc.close()
        await drain(nc)
        return nc.is_closed

    assert anyio.run(main, backend="asyncio") is True
