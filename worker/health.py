"""`placewatch health`: is this node's worker, or this container's process, healthy? One line.

Two questions, each answered by the process asked, never guessed from outside:

- with no flag, the node's worker through its micro service: a request to
  `<prefix>.service.<node>.telemetry` must come back with a sample younger than three of
  the worker's intervals (a lease's rule: three missed ticks and it is not working). It
  proves the whole path: the worker ticks, it is connected, and NATS carries its answers.
  It makes a NATS connection of its own each time, so it is for a compose healthcheck or a
  readiness probe, at a period a fleet's servers can take;
- with `--heartbeat`, the heartbeat file the process itself writes (--health-file,
  PLACEWATCH_HEALTH_FILE): the worker's says whether its tick loop still ticks, `watch`'s
  and `alerts`' whether their own connection's PINGs are answered (placewatch/heartbeat.py).
  No network: for a liveness probe, which must not restart a fleet's workers because the
  NATS cluster is away.

Exit 0 healthy, 1 not, 2 a setting is wrong. Imports the NATS client only to ask the worker.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread

from placewatch.arguments import seconds
from placewatch.heartbeat import PERIODS, Beat, judge_beat, read_text, since, write_beat
from placewatch.schemas import NodeTelemetry, decode, subjects
from placewatch.schemas.codec import DecodeError

from .config import Settings

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 3.0
EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1


def add_arguments(health: argparse.ArgumentParser) -> None:
    health.add_argument("--node", help="the node whose worker to ask (default: the short hostname)")
    health.add_argument(
        "--heartbeat",
        action="store_true",
        help="read the heartbeat file the process writes (--health-file) instead of asking "
        "the node's worker over NATS",
    )
    health.add_argument(
        "--timeout",
        type=seconds,
        default=ASK_TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for connecting and for the worker's answer, each ({ASK_TIMEOUT_S:g})",
    )


def command(settings: Settings, args: argparse.Namespace) -> int:
    if args.heartbeat:
        if settings.health_file is None:
            ok, line = False, "--heartbeat needs --health-file PATH (or PLACEWATCH_HEALTH_FILE)"
        else:
            path = settings.health_file
            ok, line = judge_beat(path, read_text(path), time.time())
    else:
        ok, line = anyio.run(ask_worker, settings, args.timeout, backend="asyncio")
    print(("ok: " if ok else "unhealthy: ") + line, flush=True)
    return EXIT_HEALTHY if ok else EXIT_UNHEALTHY


async def ask_worker(settings: Settings, limit_s: float) -> tuple[bool, str]:
    """Ask the node's micro service for its latest telemetry; healthy when it is fresh."""
    import nats  # noqa: PLC0415 - the heartbeat check runs without the NATS client
    import nats.errors  # noqa: PLC0415

    from placewatch.connection import redact  # noqa: PLC0415

    from .bus.options import connect_options  # noqa: PLC0415

    servers = settings.nats or [subjects.LOCAL_URL]
    where = ", ".join(redact(s) for s in servers)
    subject = f"{subjects.service(settings.node, settings.prefix)}.telemetry"

    async def quiet(exc: Exception) -> None:
        return None  # each failed attempt is said once, below, not as a traceback

    try:
        # nats-py tries each server again (max_reconnect_attempts 0 is "for ever") even with
        # reconnects off: the whole connect is bounded here instead.
        with anyio.fail_after(limit_s):
            nc = await nats.connect(
                servers=servers,
                name=f"placewatch health {settings.node}",
                **connect_options(settings),
                inbox_prefix=subjects.inbox(settings.node),
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                connect_timeout=limit_s,
                error_cb=quiet,
            )
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        why = redact(str(exc)) or f"no connection within {limit_s:g} s"
        return False, (
            f"cannot connect to NATS at {where} ({why}); check --nats (PLACEWATCH_NATS), the "
            "credentials, and that the servers run"
        )
    try:
        started = time.monotonic()
        reply = await nc.request(subject, b"", timeout=limit_s)
        took_ms = (time.monotonic() - started) * 1000
    except nats.errors.NoRespondersError:
        return False, (
            f"no worker answers on {subject} at {where}: is `placewatch run` running for node "
            f"{settings.node!r} (--node, PLACEWATCH_NODE) and connected to these servers?"
        )
    except (nats.errors.Error, TimeoutError) as exc:
        return False, (
            f"node {settings.node}'s worker did not answer on {subject} within {limit_s:g} s "
            f"({type(exc).__name__}); its log says why, or these credentials may not publish "
            "there (docs/operations.md, Least privilege)"
        )
    finally:
        await nc.close()
    return judge_answer(settings.node, reply.data, dict(reply.headers or {}), took_ms)


def judge_answer(
    node: str, data: bytes, headers: dict[str, Any], took_ms: float, now: datetime | None = None
) -> tuple[bool, str]:
    """Healthy when the worker answered with a sample younger than PERIODS of its intervals."""
    error = headers.get("Nats-Service-Error")
    if error is not None:
        code = headers.get("Nats-Service-Error-Code", "?")
        return False, f"node {node}'s worker answered with error {code}: {error}"
    try:
        telemetry = decode(data, NodeTelemetry, headers)
    except DecodeError as exc:
        return False, f"node {node}'s worker answered with what is not telemetry: {exc}"
    age = ((now or datetime.now(UTC)) - telemetry.time).total_seconds()
    limit = PERIODS * telemetry.interval_s
    said = (
        f"node {node}'s worker answered in {took_ms:.0f} ms with a sample {age:.1f} s old "
        f"(every {telemetry.interval_s:g} s, seq {telemetry.seq})"
    )
    if age > limit:
        return False, f"{said}: older than {limit:g} s, so its ticks have stopped; its log says why"
    return True, said


class TickBeats:
    """The worker's heartbeat: whether its tick loop still ticks, written every interval by
    a task of its own, so that a tick that hangs (a GPU tool in the driver, a read that does
    not return) is told by a heartbeat that goes on saying so. Before the first tick the
    worker is starting (waiting for the server or its lease): alive, and said so; from the
    start of the tick loop on, a tick is due every interval, the first one too."""

    def __init__(self, path: str, interval: float, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.interval = interval
        self.every = min(max(interval, 1.0), 10.0)
        """How often it is written: every interval, but at least every 10 s and at most
        every second (a 0.1 s interval need not write ten files a second)."""
        self.clock = clock
        self.started = clock()
        self.last_tick: float | None = None
        self.ticks = 0
        self.write_failed = False

    def running(self) -> None:
        """The tick loop starts (the lease is held): ticks are due from now on."""
        self.last_tick = self.clock()

    def ticked(self) -> None:
        self.last_tick = self.clock()
        self.ticks += 1

    def beat(self) -> Beat:
        now = self.clock()
        if self.last_tick is None:
            return Beat(
                os.getpid(),
                "run",
                now,
                self.every,
                True,
                f"starting: waiting for the server or the node's lease since "
                f"{since(self.started, now)}",
            )
        age = now - self.last_tick
        ok = age <= PERIODS * self.interval
        if ok:
            why = f"ticking: {self.ticks} ticks, the last {since(self.last_tick, now)}"
        else:
            done = f"{self.ticks} ticks done" if self.ticks else "its first tick not done"
            why = (
                f"no tick for {age:.0f} s ({done}; every {self.interval:g} s): a GPU tool "
                "or an engine log read may hang; its log and `placewatch doctor` say more"
            )
        return Beat(os.getpid(), "run", now, self.every, ok, why)

    async def keep(self) -> None:
        """Write the heartbeat every `every` seconds, until cancelled."""
        while True:
            try:
                await anyio.to_thread.run_sync(write_beat, self.path, self.beat())
                self.write_failed = False
            except OSError as exc:
                if not self.write_failed:
                    log.error("cannot write the health file %s (%s)", self.path, exc.strerror)
                self.write_failed = True
            await anyio.sleep(self.every)
