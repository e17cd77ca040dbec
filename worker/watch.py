"""`placewatch watch`: the fleet, live, in a terminal, from the bus.

Built on placewatch.consumer.FleetView, so it shows at once what the bus
keeps (each node's last sample, each shard's last status) and then follows
it. On a terminal the frame is redrawn in place, on change and every second
(the ages tick); into a pipe or file each frame is appended, at most one a
second. `--once` prints the fleet and exits, `--json` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from datetime import UTC, datetime
from functools import partial
from typing import Any, TextIO
from urllib.parse import urlparse

import anyio
import msgspec
from nats.aio.client import Client

from placewatch.consumer import Fleet, FleetView
from placewatch.schemas import ComputeStatus, GpuSample, NodeTelemetry

from .bus import connect, connect_options, redact
from .config import Settings

LOCAL_URL = "nats://127.0.0.1:4222"
"""Where `placewatch run` puts its embedded server by default."""
INBOX = "_INBOX.placewatch-watch"
"""Its replies' prefix, so its credentials may subscribe to its own only (docs/consumers.md)."""
CONNECT_TIMEOUT_S = 5.0
SETTLE_S = 1.0
"""With --once: how long to take live messages after filling from the stream and bucket."""
FRAME_S = 1.0
_TTY_GAP_S = 0.25
_CLEAR = "\x1b[H\x1b[2J"
_STALE_INTERVALS = 3
_GIB = 1 << 30


class Unreachable(Exception):
    """No server answered in time; the message says where and what to check."""


def add_command(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    watch = commands.add_parser(
        "watch",
        parents=parents,
        help="a live view of the fleet from the bus",
        description="Nodes, GPUs and shards as the bus has them, redrawn as they change. "
        f"With no --nats, the embedded default {LOCAL_URL}.",
    )
    watch.add_argument("--once", action="store_true", help="print the fleet once and exit")
    watch.add_argument("--json", action="store_true", help="print it as JSON (implies --once)")
    watch.add_argument(
        "--wait",
        type=float,
        default=SETTLE_S,
        metavar="SECONDS",
        help=f"with --once: take live messages this long before printing ({SETTLE_S:g})",
    )
    watch.set_defaults(handler=command)


def command(settings: Settings, args: argparse.Namespace) -> int:
    options = connect_options(settings)  # a ConfigError is the command line's to report
    if args.log_level is None:
        # The screen says how the connection fares; log lines would scroll it away.
        logging.getLogger("placewatch").setLevel(logging.ERROR)
    servers = settings.nats or [LOCAL_URL]
    try:
        anyio.run(
            partial(
                _watch,
                servers=servers,
                options=options,
                prefix=settings.prefix,
                once=args.once or args.json,
                as_json=args.json,
                wait=args.wait,
                out=sys.stdout,
            ),
            backend="asyncio",
        )
    except Unreachable as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


async def _watch(
    *,
    servers: list[str],
    options: dict[str, Any],
    prefix: str,
    once: bool,
    as_json: bool,
    wait: float,
    out: TextIO,
) -> None:
    nc = await connect_within(
        servers, "placewatch watch", options | {"inbox_prefix": INBOX}, CONNECT_TIMEOUT_S
    )
    changed = asyncio.Event()
    view = FleetView(nc, prefix, on_change=lambda _: changed.set())
    try:
        await view.start()
        if once:
            await anyio.sleep(wait)
            fleet = view.snapshot()
            if as_json:
                out.write(msgspec.json.format(msgspec.json.encode(fleet), indent=2).decode())
                out.write("\n")
            else:
                out.write(render(fleet, datetime.now(UTC)) + "\n")
            out.flush()
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            await _draw(view, nc, changed, out, servers)
    finally:
        await view.stop()
        await nc.close()


async def connect_within(
    servers: list[str], name: str, options: dict[str, Any], seconds: float
) -> Client:
    """The first connection within `seconds`, else Unreachable saying why."""
    try:
        with anyio.fail_after(seconds):
            return await connect(servers, name, options)
    except TimeoutError:
        pass
    where = ", ".join(redact(s) for s in servers)
    if not await _listening(servers[0]):
        why = "nothing answers there; check --nats (or PLACEWATCH_NATS) and that a server runs"
    else:
        why = "a server answers but the connection failed; check the credentials and TLS flags"
    raise Unreachable(f"cannot reach NATS at {where} within {seconds:g} s: {why}")


async def _listening(url: str) -> bool:
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    try:
        with anyio.fail_after(1):
            stream = await anyio.connect_tcp(parsed.hostname or "127.0.0.1", parsed.port or 4222)
    except (OSError, TimeoutError):
        return False
    await stream.aclose()
    return True


async def _draw(
    view: FleetView, nc: Client, changed: asyncio.Event, out: TextIO, servers: list[str]
) -> None:
    tty = out.isatty()
    where = ", ".join(redact(s) for s in servers)
    drawn: bool | None = None  # whether connected, as last drawn
    while True:
        connected = nc.is_connected
        if tty or changed.is_set() or connected != drawn:
            changed.clear()
            drawn = connected
            state = "" if connected else "  DISCONNECTED: showing the last known"
            frame = render(view.snapshot(), datetime.now(UTC), f"{where}{state}")
            out.write(f"{_CLEAR}{frame}\n" if tty else f"{frame}\n\n")
            out.flush()
            await anyio.sleep(_TTY_GAP_S if tty else FRAME_S)  # a burst of changes, one frame
            if changed.is_set():
                continue
        with anyio.move_on_after(FRAME_S - _TTY_GAP_S if tty else FRAME_S):
            await changed.wait()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


def render(fleet: Fleet, now: datetime, where: str = "") -> str:
    """One frame: a header line, then each node with its GPUs and shards."""
    firing = {(f.node, f.shard): f for f in fleet.firing}
    shards: dict[str, list[ComputeStatus]] = {}
    for s in fleet.shards:
        shards.setdefault(s.node, []).append(s)
    telemetry = {t.node: t for t in fleet.nodes}
    names = sorted(set(telemetry) | set(shards))
    lines = [
        f"placewatch  {where + '  ' if where else ''}{now:%Y-%m-%d %H:%M:%S} UTC  "
        f"{_count(len(names), 'node')}  {_count(len(fleet.shards), 'shard')}  "
        f"{len(firing)} firing"
    ]
    for name in names:
        lines.append("")
        t = telemetry.get(name)
        lines += _node(name, t, now) if t is not None else [f"{name}  no telemetry yet"]
        if t is not None and t.gpus:
            lines.append(
                f"  {'GPU':>3}  {'util':>4}  {'used':>6}  {'foreign':>7}  {'free':>6}  "
                f"{'temp':>5}  {'power W':>9}  name"
            )
            lines += [_gpu(g) for g in t.gpus]
        for s in shards.get(name, []):
            lines.append(_shard(s, firing.get((s.node, s.shard)) is not None))
    if not names:
        lines += ["", "no nodes yet: is a worker publishing with this prefix?"]
    return "\n".join(lines)


def _node(name: str, t: NodeTelemetry, now: datetime) -> list[str]:
    age = max((now - t.time).total_seconds(), 0.0)
    stale = "  STALE" if age > _STALE_INTERVALS * t.interval_s else ""
    line = f"{name}  seen {age:.0f} s ago{stale}  session {t.session}"
    if t.host is not None:
        h = t.host
        cpu = "-" if h.cpu_pct is None else f"{h.cpu_pct:.0f}%"
        line += (
            f"  cpu {cpu} of {h.cpu_count or '?'}  memory {_gib(h.memory_available_bytes)} "
            f"of {_gib(h.memory_total_bytes)} GiB available"
        )
    if not t.gpus:
        failed = [s.error or s.name for s in t.sources if not s.ok]
        line += "  no GPUs" + (f" ({'; '.join(failed)})" if failed else "")
    return [line]


def _gpu(g: GpuSample) -> str:
    util = "-" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
    temp = "-" if g.temperature_c is None else f"{g.temperature_c:.0f} C"
    power = "-" if g.power_w is None else f"{g.power_w:.0f}"
    if g.power_cap_w is not None:
        power += f"/{g.power_cap_w:.0f}"
    return (
        f"  {g.index:>3}  {util:>4}  {_gib(g.memory_used_bytes):>6}  "
        f"{_gib(g.foreign_bytes):>7}  {_gib(g.memory_free_bytes):>6}  {temp:>5}  {power:>9}  "
        f"{g.name or '?'}"
    )


def _shard(s: ComputeStatus, firing: bool) -> str:
    gpus = ",".join(str(i) for i in s.placed_gpus) or "cpu"
    mark = "FIRING " if firing else ""
    reason = f"  {s.reason}" if s.verdict not in ("gpu", "cpu") else ""
    return f"  shard {s.shard}  {mark}{s.verdict}  placed {gpus}  pid {s.pid or '-'}{reason}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / _GIB:.1f}"
