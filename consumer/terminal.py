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
import functools
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

import anyio
import msgspec
from nats.aio.client import Client

from placewatch.connection import Bus, Unreachable, connect_within, redact
from placewatch.lifecycle import stop_on_signal
from placewatch.schemas import ComputeStatus, GpuSample, NodeSample, partitions

from .capacity import STALE_INTERVALS, shared_among
from .fleet import Fleet, FleetView

INBOX = "_INBOX.placewatch-watch"
"""Its replies' prefix, so its credentials may subscribe to its own only (docs/consumers.md)."""
CONNECT_TIMEOUT_S = 5.0
SETTLE_S = 1.0
"""With --once: how long to take live messages after filling from the stream and bucket."""
FRAME_S = 1.0
_TTY_GAP_S = 0.25
_CLEAR = "\x1b[H\x1b[2J"
CLOCK_OFF_S = 2.0
"""A node's clock further off this one's than this is named on its line (the exporter's
PlacewatchNodeClockOff fires at the same)."""
_GIB = 1 << 30
_UNPRINTABLE = str.maketrans(
    {c: "?" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F)]}
    | {c: "?" for c in range(0x2066, 0x206A)}
    | {ord("\n"): "\n"}
)
"""Control characters (escape sequences start with one) and bidirectional overrides, each
shown as `?`: names, reasons and GPU names come from any node's messages, and a terminal
must not take them as commands (set its title, write the clipboard, hide or reorder text)."""


def add_arguments(watch: argparse.ArgumentParser) -> None:
    watch.add_argument("--once", action="store_true", help="print the fleet once and exit")
    watch.add_argument("--json", action="store_true", help="print it as JSON (implies --once)")
    watch.add_argument(
        "--wait",
        type=float,
        default=SETTLE_S,
        metavar="SECONDS",
        help=f"with --once: take live messages this long before printing ({SETTLE_S:g})",
    )
    watch.add_argument(
        "--partition",
        type=partition_argument,
        metavar="P/N",
        help="only the nodes of partition P of the N the servers' mapping makes (default: all)",
    )


def partition_argument(text: str) -> tuple[int, int]:
    """`P/N` as (P, N), or an error argparse prints, saying what to give."""
    p, _, n = text.partition("/")
    try:
        partition, count = int(p), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not P/N: give a partition and the N of the servers' partition "
            "mapping, such as 2/4"
        ) from None
    try:
        partitions.check(partition, count)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return partition, count


def command(bus: Bus, args: argparse.Namespace) -> int:
    return main(
        bus,
        once=args.once,
        as_json=args.json,
        wait=args.wait,
        quiet=args.log_level is None,
        partition=args.partition,
    )


def main(
    bus: Bus,
    *,
    once: bool,
    as_json: bool,
    wait: float = SETTLE_S,
    quiet: bool = True,
    partition: tuple[int, int] | None = None,
) -> int:
    """`placewatch watch`: 0, or 1 when no server answered. `partition`: (P, N), the nodes of
    one partition only."""
    if quiet:
        # The screen says how the connection fares; log lines would scroll it away.
        logging.getLogger("placewatch").setLevel(logging.ERROR)
    try:
        show = functools.partial(_show_fleet, partition=partition)
        anyio.run(show, bus, once or as_json, as_json, wait, sys.stdout, backend="asyncio")
    except Unreachable as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


async def _show_fleet(
    bus: Bus,
    once: bool,
    as_json: bool,
    wait: float,
    out: TextIO,
    *,
    partition: tuple[int, int] | None = None,
) -> None:
    nc = await connect_within(
        bus.servers, "placewatch watch", bus.options | {"inbox_prefix": INBOX}, CONNECT_TIMEOUT_S
    )
    changed = asyncio.Event()
    p, n = partition or (None, None)
    view = FleetView(nc, bus.prefix, partition=p, partitions=n, on_change=lambda _: changed.set())
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
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            await _draw(view, nc, changed, out, bus.servers)
    finally:
        await view.stop()
        await nc.close()


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


def render(fleet: Fleet, now: datetime, where: str = "") -> str:
    """One frame: a header line, then each node with its GPUs and shards; nothing in it a
    terminal would take as a command."""
    return _frame(fleet, now, where).translate(_UNPRINTABLE)


def _frame(fleet: Fleet, now: datetime, where: str) -> str:
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
    lines += [f"PROBLEM: {problem}" for problem in fleet.problems]
    shared = _shared(fleet, now)
    for name in names:
        lines.append("")
        t = telemetry.get(name)
        if t is None:
            lines.append(f"{name}  no telemetry yet")
        else:
            lines += _node_line(name, t, now, fleet.seen.get(name, t.time.timestamp()))
            lines += shared.get(name, [])
        if t is not None and t.gpus:
            lines.append(
                f"  {'GPU':>3}  {'util':>4}  {'used':>6}  {'foreign':>7}  {'free':>6}  "
                f"{'temp':>5}  {'power W':>9}  name"
            )
            for g in t.gpus:
                lines.append(_gpu_row(g))
                if g.health is not None and not g.health.healthy:
                    lines.append(f"       UNHEALTHY: {'; '.join(g.health.problems)}")
        for s in shards.get(name, []):
            lines.append(_shard_line(s, firing.get((s.node, s.shard)) is not None))
    if not names:
        lines += ["", "no nodes yet: is a worker publishing with this prefix?"]
    return "\n".join(lines)


def _shared(fleet: Fleet, now: datetime) -> dict[str, list[str]]:
    """Node -> a line for each of its GPUs that another live node reports too."""
    live = (
        (t.node, t)
        for t in fleet.nodes
        if now.timestamp() - fleet.seen.get(t.node, t.time.timestamp())
        <= STALE_INTERVALS * t.interval_s
    )
    lines: dict[str, list[str]] = {}
    for shared in shared_among(live):
        on = list(zip(shared.nodes, shared.gpus, strict=True))
        for node, index in on:
            others = ", ".join(f"{n} GPU {i}" for n, i in on if n != node)
            lines.setdefault(node, []).append(
                f"  SHARED GPU {index} ({shared.uuid}) is also {others}: two workers watch one "
                "machine under two names; stop one, or give both one --node"
            )
    return lines


def _clock(offset_s: float) -> str:
    """A word on the node's clock where it is more than CLOCK_OFF_S off the view's."""
    if abs(offset_s) <= CLOCK_OFF_S:
        return ""
    return f"  CLOCK {abs(offset_s):.0f} s {'ahead' if offset_s > 0 else 'behind'}"


def _node_line(name: str, t: NodeSample, now: datetime, seen: float) -> list[str]:
    age = max(now.timestamp() - seen, 0.0)
    stale = "  STALE" if age > STALE_INTERVALS * t.interval_s else ""
    line = f"{name}  seen {age:.0f} s ago{stale}{_clock(t.time.timestamp() - seen)}"
    line += f"  session {t.session}"
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


def _gpu_row(g: GpuSample) -> str:
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


def _shard_line(s: ComputeStatus, firing: bool) -> str:
    gpus = ",".join(str(i) for i in s.placed_gpus) or "cpu"
    mark = "FIRING " if firing else ""
    reason = f"  {s.reason}" if s.verdict not in ("gpu", "cpu") else ""
    sick = ",".join(str(i) for i in s.unhealthy_gpus)
    on = f"  on unhealthy GPU {sick}" if sick else ""
    stale = ""
    if s.stale:
        since = "" if s.stale_since is None else f" since {s.stale_since:%H:%M:%S}Z"
        stale = f" (stale{since}: evidence lost)"
    return (
        f"  shard {s.shard}  {mark}{s.verdict}{stale}  placed {gpus}  pid {s.pid or '-'}{on}"
        f"{reason}"
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / _GIB:.1f}"
