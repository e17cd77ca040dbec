"""`placewatch watch`: the fleet, live, from the bus.

Built on placewatch.consumer.FleetView, so it shows at once what the bus keeps (each node's
last telemetry, each shard's last status) and then follows it. On a terminal it is a
full-screen console (console.py, with the `console` extra); without Textual, or with
`--plain`, the text board is redrawn in place, cut to the screen, problems first; into a pipe
or file a board is appended per change, at most one a second. `--once` prints the board and
exits; `--json` as JSON; `--problems`, `--node` and `--shard` keep what matches.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import math
import shutil
import sys
from datetime import UTC, datetime
from typing import NamedTuple, TextIO

import anyio
from nats.aio.client import Client

from placewatch.arguments import partition_argument
from placewatch.connection import Bus, Unreachable, connect_within, redact
from placewatch.lifecycle import stop_on_signal

from ..fleet import FILL_TIMEOUT_S, FleetView
from .board import Board, selected
from .text import as_json, lines
from .watched import Watched

INBOX = "_INBOX.placewatch-watch"
"""Its replies' prefix, so its credentials may subscribe to its own only (docs/consumers.md)."""
CONNECT_TIMEOUT_S = 5.0
SETTLE_S = 1.0
"""With --once, where the streams and the bucket keep no node: how long to take live
messages (a bus without JetStream keeps nothing)."""
ONCE_FILL_S = 30.0
"""With --once: how long reading what the bus keeps may take (a live view's is 5 s): one look
prints all of it, not the part read by a deadline (10,000 nodes are 100 MB)."""
FRAME_S = 1.0
_TTY_GAP_S = 0.25
_CLEAR = "\x1b[H\x1b[2J"
WITHOUT_TEXTUAL = (
    "# Textual is not installed: pip install 'placewatch[console]' for the full-screen "
    "console (--plain: text, without this line)"
)
EXIT_PROBLEMS = 1
"""`--once --problems` found something that needs a person (as a Nagios check's non-zero)."""


class Filters(NamedTuple):
    """What `--node`, `--shard` and `--problems` keep."""

    node: str | None = None
    shard: str | None = None
    problems: bool = False

    def apply(self, board: Board) -> Board:
        return selected(board, node=self.node, shard=self.shard, problems=self.problems)


def add_arguments(watch: argparse.ArgumentParser) -> None:
    watch.add_argument("--once", action="store_true", help="print the fleet once and exit")
    watch.add_argument("--json", action="store_true", help="print it as JSON (implies --once)")
    watch.add_argument(
        "--wait",
        type=_wait,
        metavar="SECONDS",
        help="with --once: take live messages this long before printing (default: none "
        f"where the streams keep the nodes, else {SETTLE_S:g})",
    )
    watch.add_argument(
        "--partition",
        type=partition_argument,
        metavar="P/N",
        help="only the nodes of partition P of the N the servers' mapping makes (default: all)",
    )
    watch.add_argument(
        "--problems",
        action="store_true",
        help="only what needs a person (fallbacks, unknown or stale shards, silent or "
        "unhealthy nodes); with --once, exit 1 when there is any",
    )
    watch.add_argument("--node", metavar="GLOB", help="only the nodes whose name matches")
    watch.add_argument("--shard", metavar="GLOB", help="only the shards whose name matches")
    watch.add_argument(
        "--plain", action="store_true", help="text, even on a terminal (no full-screen console)"
    )


def _wait(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a wait: give seconds from 0 to 3600 (default {SETTLE_S:g})"
        )
    return value


def command(bus: Bus, args: argparse.Namespace) -> int:
    filters = Filters(node=args.node, shard=args.shard, problems=args.problems)
    if args.log_level is None:
        # The screen says how the connection fares; log lines would scroll it away.
        logging.getLogger("placewatch").setLevel(logging.ERROR)
    once = args.once or args.json
    # Textual draws on stderr: both on the terminal, or the text board on stdout.
    tty = sys.stdout.isatty() and sys.stderr.isatty()
    live = not once and not args.plain and tty
    console = live and _textual()
    hint = WITHOUT_TEXTUAL if live and not console else None
    try:
        watch = functools.partial(_watch, hint=hint)
        return anyio.run(watch, bus, args, filters, console, sys.stdout, backend="asyncio")
    except Unreachable as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def _textual() -> bool:
    try:
        import textual  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def where(bus: Bus, partition: tuple[int, int] | None) -> str:
    """The bus as the header names it: its servers, without credentials, and the partition."""
    said = ", ".join(redact(s) for s in bus.servers)
    return said + (f"  partition {partition[0]}/{partition[1]}" if partition else "")


async def _watch(
    bus: Bus,
    args: argparse.Namespace,
    filters: Filters,
    console: bool,
    out: TextIO,
    *,
    hint: str | None = None,
) -> int:
    nc = await connect_within(
        bus.servers, "placewatch watch", bus.options | {"inbox_prefix": INBOX}, CONNECT_TIMEOUT_S
    )
    changed = asyncio.Event()
    p, n = args.partition or (None, None)
    once = args.once or args.json
    view = FleetView(
        nc,
        bus.prefix,
        partition=p,
        partitions=n,
        on_change=lambda _: changed.set(),
        follow=not once,  # one look: what the streams keep is each node's latest
        fill_timeout=ONCE_FILL_S if once else FILL_TIMEOUT_S,
    )
    watched = Watched(view, where(bus, args.partition), once=once)
    if once:
        # One look, then exit: the cyclic collector's passes over 100,000 messages' objects
        # as they are read (a third of the time at 10,000 nodes) free nothing it needs.
        gc.disable()
    try:
        await view.start()
        if once:
            kept = view.kept is not None and bool(view.kept.nodes)
            wait = args.wait if args.wait is not None else 0.0 if kept else SETTLE_S
            if wait:
                await view.follow_live()
                await anyio.sleep(wait)
            return _once(watched, filters, args.json, out)
        async with anyio.create_task_group() as tg:
            await tg.start(stop_on_signal, tg.cancel_scope)  # caught before the first frame
            if console:
                from .console import Console  # noqa: PLC0415 - Textual, on a terminal only

                app = Console(watched, filters, connected=lambda: nc.is_connected)
                await app.run_async()
                tg.cancel_scope.cancel()
            else:
                await _draw(watched, filters, nc, changed, out, hint=hint)
        return 0
    finally:
        await view.stop()
        await nc.close()


def _once(watched: Watched, filters: Filters, as_json_: bool, out: TextIO) -> int:
    board = filters.apply(watched.board())
    now = datetime.fromtimestamp(watched.clock(), UTC)
    if as_json_:
        document = as_json(board, now, watched.state.problems())
        raw = getattr(out, "buffer", None)  # 30 MB at 10,000 nodes: written as it is
        if raw is None:
            out.write(document.decode() + "\n")
        else:
            out.flush()
            raw.write(document)
            raw.write(b"\n")
    else:
        out.write("\n".join(lines(board, now, watched.where, watched.state.problems())) + "\n")
    out.flush()
    found = any(r.problem for r in board.shards) or any(n.problems for n in board.nodes)
    return EXIT_PROBLEMS if filters.problems and found else 0


async def _draw(
    watched: Watched,
    filters: Filters,
    nc: Client,
    changed: asyncio.Event,
    out: TextIO,
    *,
    hint: str | None = None,
) -> None:
    tty = out.isatty()
    drawn: bool | None = None  # whether connected, as last drawn
    while True:
        connected = nc.is_connected
        if tty or changed.is_set() or connected != drawn:
            changed.clear()
            drawn = connected
            state = "" if connected else "  DISCONNECTED: showing the last known"
            now = datetime.fromtimestamp(watched.clock(), UTC)
            board = filters.apply(watched.board())
            frame = lines(board, now, watched.where + state, watched.state.problems())
            if hint is not None:
                frame.insert(2, hint)
            if tty:  # what fits, problems first: the header and the firing rows stay on screen
                frame = frame[: max(shutil.get_terminal_size().lines - 1, 3)]
            text = "\n".join(frame)
            out.write(f"{_CLEAR}{text}\n" if tty else f"{text}\n\n")
            out.flush()
            await anyio.sleep(_TTY_GAP_S if tty else FRAME_S)  # a burst of changes, one frame
            if changed.is_set():
                continue
        with anyio.move_on_after(FRAME_S - _TTY_GAP_S if tty else FRAME_S):
            await changed.wait()
