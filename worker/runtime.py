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
import anyio.to_thread
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from placewatch.schemas import ComputeStatus, FallbackEvent, subjects

from .bus import Publisher, connect, connect_options, inbox_prefix
from .config import Settings
from .embedded import EmbeddedServer
from .gpu.registry import chains_for
from .host import HostSampler
from .outbox import EventOutbox, StreamSettings
from .sampler import NodeSampler, new_session
from .service import Latest, start_service
from .shards.bucket import PlacementsBucket
from .shards.events import EventTracker
from .shards.watch import ShardWatch, shard_watch

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 2.0
RETRY_FIRST_S, RETRY_MOST_S = 1.0, 30.0
"""The placements watch's pauses between tries."""


async def run(settings: Settings, out: TextIO) -> None:
    options = connect_options(
        settings
    )  # a bad credentials or TLS file stops us before anything runs
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
        session = new_session()
        bucket = PlacementsBucket(settings.node)
        sampler = NodeSampler(
            settings.node,
            settings.interval,
            chains_for(settings),
            HostSampler(),
            session=session,
            watch=shard_watch(settings, session, bucket),
        )
        tracker = EventTracker(settings.node, session, settings.prefix)
        nc: Client | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, tg.cancel_scope)
                nc = await connect(
                    servers,
                    f"placewatch {settings.node}",
                    options | {"inbox_prefix": inbox_prefix(settings.node)},
                )
                tg.start_soon(_watch_placements, bucket, nc, settings.create, settings.replicas)
                worker = Worker(
                    sampler,
                    tracker,
                    Publisher(nc, settings.prefix, settings.encoding),
                    EventOutbox(
                        nc,
                        settings.prefix,
                        settings.encoding,
                        streams=StreamSettings(
                            settings.create, settings.replicas, settings.storage
                        ),
                    ),
                )
                tg.start_soon(_set_up_streams, worker.outbox)
                with anyio.move_on_after(5):
                    tracker.seed(await worker.outbox.previous(settings.node))
                # Drained with the connection at the end: no stop of its own.
                await start_service(
                    nc,
                    settings.node,
                    worker.latest,
                    worker.tick,
                    prefix=settings.prefix,
                    encoding=settings.encoding,
                )
                log.info(
                    "node %s publishing on %s.telemetry.%s every %g s (session %s)",
                    settings.node,
                    settings.prefix,
                    settings.node,
                    settings.interval,
                    session,
                )
                if sampler.watch is not None:
                    tg.start_soon(follow_logs, sampler.watch, worker)
                await worker.loop(settings.interval)
        finally:
            with anyio.move_on_after(DRAIN_TIMEOUT_S, shield=True):
                if nc is not None and not nc.is_closed:
                    await nc.drain()


class Worker:
    """Sample, judge, publish events, publish telemetry: once a tick."""

    def __init__(
        self, sampler: NodeSampler, tracker: EventTracker, publisher: Publisher, outbox: EventOutbox
    ) -> None:
        self.sampler = sampler
        self.tracker = tracker
        self.publisher = publisher
        self.outbox = outbox
        self.latest = Latest()
        self._lock = anyio.Lock()  # a re-check on demand never overlaps the loop's tick
        self._ticked = anyio.Event()

    async def tick(self) -> None:
        async with self._lock:
            try:
                await self._tick()
            finally:
                self._ticked.set()
                self._ticked = anyio.Event()

    async def ticked(self) -> None:
        """Until the next tick is over."""
        await self._ticked.wait()

    async def _tick(self) -> None:
        tick = await self.sampler.sample()
        self.latest.telemetry = tick.telemetry
        self.latest.statuses = tick.shards.statuses if tick.shards else []
        if tick.shards is not None:
            changes = self.tracker.changes(tick.shards.statuses, tick.shards.gone)
            for change in changes:
                _log_change(change.message)
            self.outbox.add(changes)
        await self.outbox.flush()
        await self.publisher.telemetry(tick.telemetry)

    async def loop(self, interval: float) -> None:
        """Tick on a fixed cadence; a slow tick delays, never stacks, the next."""
        next_at = time.monotonic()
        while True:
            try:
                await self.tick()
            except Exception:
                # A defect in one tick must not stop a node agent; the next tick tries afresh.
                log.exception("tick failed; continuing")
            next_at += interval
            now = time.monotonic()
            next_at = max(next_at, now)  # a tick that overran starts the next now, not a burst
            await anyio.sleep(next_at - now)


LOG_POLL_S = 0.2


async def _set_up_streams(outbox: EventOutbox) -> None:
    """The streams and buckets exist from the start, so a gateway can fill from them before
    any shard event; a failure here is retried when the first event goes out."""
    try:
        await outbox.setup()
    except (nats.errors.Error, TimeoutError) as exc:
        log.warning("streams and buckets not ready yet (%s); retried with the first event", exc)


async def follow_logs(watch: ShardWatch, worker: Worker) -> None:
    """Judge the shards again as soon as an engine's log says something new.

    With no log to follow it waits for the end of the next tick, the only
    thing that places a shard with a log (and reads that log itself), so an
    idle worker has no wake-ups of its own here: polling five times a second,
    then once, cost a tenth and more of a worker's CPU (bench/footprint.py).
    """
    while True:
        if not watch.following():
            await worker.ticked()
            continue
        await anyio.sleep(LOG_POLL_S)
        if await anyio.to_thread.run_sync(watch.follow_logs):
            await worker.tick()


def _log_change(message: ComputeStatus | FallbackEvent) -> None:
    if isinstance(message, FallbackEvent):
        level = logging.WARNING if message.state == "firing" else logging.INFO
        log.log(level, "fallback %s: shard %s", message.state, message.status.shard)
    else:
        log.info("shard %s: %s: %s", message.shard, message.verdict, message.reason)


async def _watch_placements(
    bucket: PlacementsBucket, nc: Client, create: bool, replicas: int
) -> None:
    """Follow the placements bucket; without JetStream, say so and carry on without it.

    Tries that fail at once wait longer each time, up to RETRY_MOST_S; one that had been
    following for longer than that is a new outage, retried after RETRY_FIRST_S again.
    An outage is told once, and again only when what the server says changes.
    """
    delay = RETRY_FIRST_S
    said = ""
    while True:
        started = time.monotonic()
        try:
            await bucket.watch(nc, create=create, replicas=replicas)
        except (nats.errors.Error, TimeoutError) as exc:
            if time.monotonic() - started >= RETRY_MOST_S:
                delay, said = RETRY_FIRST_S, ""
            why = _watch_failure(exc)
            log.log(
                logging.DEBUG if why == said else logging.WARNING,
                "cannot watch KV %s (%s); retrying in %g s, then at most every %g s",
                subjects.BUCKET_PLACEMENTS,
                why,
                delay,
                RETRY_MOST_S,
            )
            said = why
        await anyio.sleep(delay)
        delay = min(delay * 2, RETRY_MOST_S)


def _watch_failure(exc: BaseException) -> str:
    if isinstance(exc, (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError)):
        return (
            "the server has no JetStream: placements come from the shards file and discovery "
            "alone; enable it with nats-server -js"
        )
    return str(exc) or type(exc).__name__


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: draining and stopping", signal.Signals(signum).name)
            scope.cancel()
            return
