"""The worker: one anyio task group owns every loop.

nats-py is asyncio-only, so the worker runs on anyio's asyncio backend.
SIGTERM or SIGINT cancels the group; the connection is then drained and
the embedded server (if any) stopped, all within a few seconds.
"""

from __future__ import annotations

import logging
import signal
import time
from contextlib import AsyncExitStack
from typing import TextIO

import anyio
from nats.aio.client import Client

from .bus import Publisher, connect
from .config import Settings
from .embedded import EmbeddedServer
from .gpu.registry import default_chains
from .host import HostSampler
from .probe import ProbeRunner
from .sampler import NodeSampler

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 2.0


async def run(settings: Settings, out: TextIO) -> None:
    async with AsyncExitStack() as stack:
        servers = settings.nats
        if not servers:
            server = await stack.enter_async_context(
                EmbeddedServer(settings.state_dir, settings.embedded_port)
            )
            servers = [server.url]
            print(
                f"placewatch: embedded nats-server at {server.url}; watch with: "
                f"nats sub -s {server.url} '{settings.prefix}.>'",
                file=out,
                flush=True,
            )
        sampler = NodeSampler(
            settings.node,
            settings.interval,
            default_chains(ProbeRunner(settings.probe_timeout), settings.kfd_root),
            HostSampler(),
        )
        nc: Client | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, tg.cancel_scope)
                nc = await connect(servers, name=f"placewatch {settings.node}")
                publisher = Publisher(nc, settings.prefix, settings.encoding)
                log.info(
                    "node %s publishing on %s.telemetry.%s every %g s (session %s)",
                    settings.node,
                    settings.prefix,
                    settings.node,
                    settings.interval,
                    sampler.session,
                )
                await _tick_loop(sampler, publisher, settings.interval)
        finally:
            with anyio.move_on_after(DRAIN_TIMEOUT_S, shield=True):
                if nc is not None and not nc.is_closed:
                    await nc.drain()


async def _tick_loop(sampler: NodeSampler, publisher: Publisher, interval: float) -> None:
    """Sample and publish on a fixed cadence; a slow tick delays, never stacks, the next."""
    next_at = time.monotonic()
    while True:
        try:
            telemetry = await sampler.sample()
            await publisher.telemetry(telemetry)
        except Exception:
            # A defect in one tick must not stop a node agent; the next tick tries afresh.
            log.exception("tick failed; continuing")
        next_at += interval
        now = time.monotonic()
        next_at = max(next_at, now)  # a tick that overran starts the next now, not a burst
        await anyio.sleep(next_at - now)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: draining and stopping", signal.Signals(signum).name)
            scope.cancel()
            return
