"""The worker: one anyio task group owns every loop.

nats-py is asyncio-only, so the worker runs on anyio's asyncio backend.
SIGTERM or SIGINT cancels the group; the connection is then drained and
the embedded server (if any) stopped, all within a few seconds.

The tasks of the group: the tick loop (the only caller of a tick), EngineLogs
(every engine log, followed), the placements bucket followed, the streams and
buckets set up, the node's lease kept, and the signal handler. A log that
says something new, or a `recheck` request to the micro service, asks the
loop for a tick sooner. The lease is taken before anything else talks to the
bus: a second worker with the node's name leaves no trace, and one whose
lease another took stops the group as a signal does.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import AsyncExitStack
from typing import TextIO, TypeVar

import anyio
import nats.errors
import nats.js.errors
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream
from nats.aio.client import Client

from placewatch.backoff import Backoff
from placewatch.connection import connect, redact
from placewatch.heartbeat import check_folder
from placewatch.lifecycle import drain, stop_on_signal
from placewatch.schemas import ComputeStatus, FallbackEvent, SourceStatus, lean, subjects
from placewatch.schemas.streams import consumers_refused

from .bus.bucket import PlacementsBucket
from .bus.events import EventTracker
from .bus.lease import LeaseKeeper, node_lease
from .bus.options import connect_options
from .bus.outbox import EventOutbox
from .bus.publish import Publisher
from .bus.restore import lacking, missing
from .bus.service import start_service
from .bus.streams import StreamSettings
from .config import ConfigError, Settings
from .deadline import INPUT_SHARE, Deadline
from .embedded import EmbeddedServer
from .engines.evidence.follow import EngineLogs
from .health import TickBeats
from .latest import Latest
from .pipeline import Pipeline, new_session

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_FIRST_S, RETRY_MOST_S = 1.0, 30.0
"""The placements bucket's pauses between tries to follow it."""
PREVIOUS_WAIT_S = 5.0
"""How long a starting worker waits for the statuses its last session left."""
FIRST_TICK_S = 1.0
"""What the first tick's engine answers get beyond a tick's share, after the GPUs' first
answer (which it waits for whole: gpu/reads.py). Nothing is published yet, so no cadence is
kept; and a first health check imports urllib, which on a loaded node takes longer than a
short interval's share: without it, every shard with a health URL read `starting` at each
start, then its verdict."""


async def run(settings: Settings, out: TextIO) -> None:
    """The worker, until SIGTERM or SIGINT. Raises LeaseHeld when another live worker holds
    the node's name (nothing was published), LeaseLost when another took it over (publishing
    stopped), EmbeddedError when the embedded server cannot start."""
    options = connect_options(settings)  # a bad credentials or TLS file stops us at once
    beats = _tick_beats(settings)
    latest = Latest()
    async with AsyncExitStack() as stack:
        _serve_metrics(stack, settings.metrics_listen, latest)
        servers = settings.nats or [await _embedded(stack, settings, out)]
        session = new_session()
        streams = StreamSettings(settings.create, settings.replicas, settings.storage)
        lease = LeaseKeeper(
            node_lease(settings.node, session, settings.interval),
            streams,
            prefix=settings.prefix,
            takeover=settings.takeover,
        )
        bucket = PlacementsBucket(settings.node, prefix=settings.prefix)
        pipeline = Pipeline.from_settings(settings, session, bucket)
        nc: Client | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_on_signal, tg.cancel_scope, "draining and stopping")
                if beats is not None:
                    tg.start_soon(beats.keep)
                nc = await connect(
                    servers,
                    f"placewatch {settings.node}",
                    options | {"inbox_prefix": subjects.inbox(settings.node)},
                )
                # Nothing is published, nor any bucket followed, before the lease is held.
                await tg.start(lease.keep, nc, tg.cancel_scope)
                tg.start_soon(_follow_placements, bucket, nc, streams)
                worker = await _start_worker(
                    tg,
                    nc,
                    settings,
                    session=session,
                    pipeline=pipeline,
                    streams=streams,
                    latest=latest,
                    beats=beats,
                    lease=lease,
                )
                print(f"placewatch: {how_to_look(servers, settings.prefix)}", file=out, flush=True)
                await worker.run(settings.interval)
        finally:
            await lease.release()
            await drain(nc)
        lease.check()


def _serve_metrics(stack: AsyncExitStack, listen: str | None, latest: Latest) -> None:
    """The node's /metrics from `latest`, served from the start (empty until the first tick),
    stopped with the stack; ConfigError where it cannot listen."""
    if listen is None:
        return
    from .metrics import serve_node  # noqa: PLC0415 - the HTTP server, when asked for

    served, _ = serve_node(listen, latest)
    stack.callback(served.server_close)
    stack.callback(served.shutdown)
    log.info("serving this node's Prometheus metrics on http://%s/metrics", listen)


def _tick_beats(settings: Settings) -> TickBeats | None:
    """The heartbeat the worker keeps in its health file, if it was given one."""
    if settings.health_file is None:
        return None
    problem = check_folder(settings.health_file)
    if problem is not None:
        raise ConfigError(problem)
    return TickBeats(settings.health_file, settings.interval)


async def _embedded(stack: AsyncExitStack, settings: Settings, out: TextIO) -> str:
    """Start the embedded server, stopped with the stack; its URL."""
    server = await stack.enter_async_context(
        EmbeddedServer(settings.state_dir, settings.embedded_port)
    )
    print(f"placewatch: embedded nats-server at {server.url}", file=out, flush=True)
    return server.url


def how_to_look(servers: list[str], prefix: str) -> str:
    """What `run` says at the start: the command that shows what it publishes."""
    url = ",".join(redact(s) for s in servers)
    flags = "" if servers == [subjects.LOCAL_URL] else f" --nats {url}"
    flags += "" if prefix == subjects.DEFAULT_PREFIX else f" --prefix {prefix}"
    return (
        f"look with: placewatch watch{flags} (or, with the NATS CLI: nats sub -s {url} "
        f"'{prefix}.>'; docs/operations.md#the-nats-cli)"
    )


def no_gpu_tool(sources: list[SourceStatus]) -> str | None:
    """What to do when no GPU tool answered, naming each and why; None when one did."""
    if any(s.ok for s in sources):
        return None
    said = "; ".join(f"{s.name}: {s.error or 'no answer'}" for s in sources) or "none is set"
    return (
        f"no GPU tool answered ({said}): every shard placed on GPUs is judged by its engine's "
        "log alone. Install the NVIDIA driver (nvidia-smi, NVML), ROCm (rocm-smi, amd-smi) or "
        "Intel's i915 or xe driver (xpu-smi on data-center GPUs), or run `placewatch doctor`"
    )


async def _start_worker(
    tg: TaskGroup,
    nc: Client,
    settings: Settings,
    *,
    session: str,
    pipeline: Pipeline,
    streams: StreamSettings,
    latest: Latest,
    beats: TickBeats | None,
    lease: LeaseKeeper,
) -> Worker:
    """The outbox set up, the last session's statuses read, the micro service and the engine
    logs started: the tick loop, ready to run."""
    outbox = EventOutbox(nc, settings.prefix, settings.encoding, streams=streams)
    tg.start_soon(outbox.keep_set_up)
    tracker = EventTracker(settings.node, session, settings.prefix)
    with anyio.move_on_after(PREVIOUS_WAIT_S):
        tracker.seed(await outbox.previous(settings.node))
    publisher = Publisher(nc, settings.prefix, settings.encoding)
    worker = Worker(pipeline, tracker, publisher, outbox, latest=latest, beats=beats, lease=lease)
    # Drained with the connection at the end: no stop of its own.
    await start_service(
        nc,
        settings.node,
        latest,
        worker.recheck,
        prefix=settings.prefix,
        encoding=settings.encoding,
    )
    log.info(
        "node %s publishing on %s every %g s (session %s)",
        settings.node,
        subjects.telemetry(settings.node, settings.prefix),
        settings.interval,
        session,
    )
    await tg.start(pipeline.sampler.run)
    if pipeline.logs is not None:
        await tg.start(pipeline.logs.run)
        tg.start_soon(_tick_on_new_evidence, pipeline.logs, worker)
    return worker


class Worker:
    """Sample, judge, build, flush events, publish inventory and telemetry: once a tick, in
    that order.

    What the lease keeper and the outbox learn of the bus comes as messages (LeaseRemoved,
    StoresAppeared), each taken at the step of the tick that acts on it."""

    def __init__(
        self,
        pipeline: Pipeline,
        tracker: EventTracker,
        publisher: Publisher,
        outbox: EventOutbox,
        *,
        latest: Latest | None = None,
        beats: TickBeats | None = None,
        lease: LeaseKeeper | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.tracker = tracker
        self.publisher = publisher
        self.outbox = outbox
        self.latest = latest if latest is not None else Latest()
        """What the micro service and /metrics answer with; this loop alone writes it."""
        self.beats = beats
        """The health file's heartbeat, told of every tick, when there is one."""
        self.lease = lease
        """The node's lease, refreshed with the telemetry when a refresh is due."""
        self._asks, self._asked = anyio.create_memory_object_stream[anyio.Event | None](math.inf)

    async def _tick(self) -> None:
        removed = bool(self.lease is not None and _waiting(self.lease.removals))
        deadline = Deadline.for_tick(self.pipeline.interval_s)  # what inputs may take
        reading = await self.pipeline.read(deadline)  # 1. the GPUs and the host
        if self.latest.scraped is None:  # the first tick: the engines' answers get longer
            deadline = Deadline.after(self.pipeline.interval_s * INPUT_SHARE + FIRST_TICK_S)
        shards = await self.pipeline.judge(reading, deadline=deadline)  # 2. every shard
        sample = self.pipeline.sample(reading, shards)  # 3. the sample, built
        if self.latest.scraped is None and (said := no_gpu_tool(sample.sources)) is not None:
            log.warning(said)  # the first tick: what a person starting it should know
        inventory, telemetry = lean.split(sample, self.latest.inventory)
        self.latest.inventory, self.latest.telemetry = inventory, telemetry
        self.latest.scraped = (telemetry, sample, time.time())
        self.latest.statuses = tuple(shards.statuses)
        changes = self.tracker.changes(shards.statuses, shards.gone)
        for change in changes:
            _log_change(change.message)
        self.outbox.add(changes)
        if _waiting(self.outbox.appearances):  # the stores are back: what they lack of it
            self.outbox.add(await missing(self.outbox, self.tracker, shards.statuses))
            self.publisher.inventory_again()
        elif removed:  # `placewatch forget` while cut off may have spoken over this worker
            self.outbox.add(await lacking(self.outbox, self.tracker, shards.statuses))
            self.publisher.inventory_again()
        await self.outbox.flush()  # 4. the events, before the telemetry that tells of them
        await self.publisher.inventory(inventory)  # 5. the inventory, when it changed
        if self.lease is not None:
            self.lease.with_telemetry()  # and the lease, in the same write, when due
        await self.publisher.telemetry(telemetry)  # 6. the telemetry, which names it

    async def run(
        self, interval: float, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Tick on a fixed cadence, and sooner when asked; a slow tick delays, never stacks,
        the next. The only caller of a tick: an asked tick leaves the cadence as it was."""
        task_status.started()
        if self.beats is not None:
            self.beats.running()
        next_at = time.monotonic()
        asked: list[anyio.Event | None] = []
        while True:
            asked += _waiting(self._asked)
            try:
                await self._tick()
            except Exception:
                # A defect in one tick must not stop a node agent; the next tick tries afresh.
                log.exception("tick failed; continuing")
            finally:
                if self.beats is not None:
                    self.beats.ticked()
                for done in asked:
                    if done is not None:
                        done.set()
                asked = []
            now = time.monotonic()
            if now >= next_at:  # the tick that was due; one that overran starts the next now
                next_at = max(next_at + interval, now)
            with anyio.move_on_after(next_at - now):
                asked.append(await self._asked.receive())

    def ask_tick(self) -> None:
        """A tick soon, without waiting for it."""
        self._asks.send_nowait(None)

    async def recheck(self) -> None:
        """A tick now (after the one under way, if any); returns once it is over."""
        done = anyio.Event()
        self._asks.send_nowait(done)
        await done.wait()


def _waiting(messages: MemoryObjectReceiveStream[T]) -> list[T]:
    """Every message waiting now, taken: the coming tick answers them all."""
    waiting: list[T] = []
    while True:
        try:
            waiting.append(messages.receive_nowait())
        except anyio.WouldBlock:
            return waiting


async def _tick_on_new_evidence(logs: EngineLogs, worker: Worker) -> None:
    """An engine's own word reaches the bus at once, not at the next interval."""
    while True:
        await logs.changed()
        worker.ask_tick()


def _log_change(message: ComputeStatus | FallbackEvent) -> None:
    if isinstance(message, FallbackEvent):
        level = logging.WARNING if message.state == "firing" else logging.INFO
        log.log(level, "fallback %s: shard %s", message.state, message.status.shard)
    else:
        log.info("shard %s: %s: %s", message.shard, message.verdict, message.reason)


async def _follow_placements(bucket: PlacementsBucket, nc: Client, streams: StreamSettings) -> None:
    """Follow the placements bucket; without JetStream, say so and carry on without it.

    Tries that fail at once wait longer each time, up to RETRY_MOST_S; one that had been
    following for longer than that is a new outage, retried after RETRY_FIRST_S again.
    An outage is told once, and again only when what the server says changes.
    """
    backoff = Backoff(RETRY_FIRST_S, RETRY_MOST_S)
    said = ""
    while True:
        started = time.monotonic()
        try:
            await bucket.follow(nc, streams)
        except (nats.errors.Error, TimeoutError) as exc:
            if time.monotonic() - started >= RETRY_MOST_S:
                backoff.reset()
                said = ""
            why = _follow_failure(exc, bucket.bucket.stream)
            log.log(
                logging.DEBUG if why == said else logging.WARNING,
                "cannot watch KV %s (%s); retrying in %g s, then at most every %g s",
                bucket.bucket.name,
                why,
                backoff.delay,
                RETRY_MOST_S,
            )
            said = why
        await backoff.wait()


def _follow_failure(exc: BaseException, stream: str) -> str:
    if isinstance(exc, (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError)):
        return (
            "the server has no JetStream: placements come from the shards file and discovery "
            "alone; enable it with nats-server -js"
        )
    return consumers_refused(exc, stream) or str(exc) or type(exc).__name__
