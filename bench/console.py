"""How `placewatch watch`'s console keeps up with a fleet: the time a key takes to be answered,
and the CPU the console takes, while it follows N simulated nodes live.

A real nats-server; a publisher process sending N nodes of 8 GPUs and 4 shards (1 in 100 in
cpu_fallback; bench/synthetic.py) as workers do: each node's inventory and shard statuses, its
telemetry every 2 s. In this process: a FleetView on that server and the console (Textual,
headless, 200x50, redrawing each second) driven by Textual's Pilot. Measured:

- a key: from its press to the screen showing it (App.simulate_key; the first frame that
  Textual paints after the key's handler has changed what it changes), for a key that moves
  the cursor, one that re-sorts the table, one that switches to the nodes, Enter on a filter
  typed after `/` and Escape clearing it (each over 40,000 rows at 10,000 nodes). (Pilot.press
  waits until the process is idle, which one following 5,000 messages a second never is.)
  Beside it, how late the event loop wakes, the cyclic collector's full passes while keys
  were timed, and for the slowest keys what they waited on (full and young passes, a board
  being built in the other thread);
- CPU: this process's CPU time over a window, as a share of one core (the view taking N/2
  telemetry messages a second, and a board built each second);
- the load: the telemetry the publisher sent from the first key to the end of the window,
  against N/2 a second, and what the view received (bench/load.py); under 95 % of it, the
  figures are not at N nodes and the script exits 1.

    .venv/bin/python -m bench.console [--nodes 1000 10000] [--window 20] [--presses 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import psutil

from bench.load import Tally, offered, paced, sent_between
from bench.servers import nats_server
from bench.synthetic import node_messages, shard_statuses
from placewatch.schemas import (
    ComputeStatus,
    NodeInventory,
    NodeTelemetry,
    encode,
    lean,
    subjects,
)

INTERVAL_S = 2.0
TARGET_MS = 100.0
TARGET_MAX_MS = 250.0
"""A key on the screen within 100 ms at the median, 250 ms at the most."""
KEYS = (
    ("down", "cursor"),
    ("o", "re-sort"),
    ("tab", "nodes/shards"),
    ("enter", "filter `fallback` applied"),
    ("escape", "filter cleared"),
)
FILTER = "fallback"


def console_fleet(nodes: int) -> list[tuple[NodeInventory, NodeTelemetry, list[ComputeStatus]]]:
    """Each node's inventory, telemetry and shard statuses: 8 GPUs of its own, 4 shards, one
    in cpu_fallback on every 100th node."""
    fleet = []
    for j in range(nodes):
        inventory, telemetry = node_messages(f"gpu-{j:05d}", gpus=8, shards=4)
        sample = lean.join(inventory, telemetry)
        own = [msgspec.structs.replace(g, uuid=f"GPU-{j:05d}-{g.index}") for g in sample.gpus]
        inventory, telemetry = lean.split(msgspec.structs.replace(sample, gpus=own))
        fallback = frozenset({"shard-01"}) if j % 100 == 0 else frozenset()
        fleet.append((inventory, telemetry, shard_statuses(sample, fallback)))
    return fleet


async def publish(url: str, nodes: int, tally: Tally) -> None:
    """Each node's telemetry every INTERVAL_S, spread over the interval, and with it, for one
    node in 15, its inventory and statuses again (a view that starts later has every node's
    within 30 s; a real worker sends them on change). The telemetry is counted in `tally`."""
    import nats

    nc = await nats.connect(url)
    fleet = console_fleet(nodes)

    async def send(j: int, cycle: int) -> int:
        inventory, telemetry, statuses = fleet[j]
        if j % 15 == (cycle + 1) % 15:
            for message, subject in (
                (inventory, subjects.inventory(inventory.node)),
                *((s, subjects.compute(s.node, s.shard)) for s in statuses),
            ):
                data, headers = encode(message)
                await nc.publish(subject, data, headers=headers)
        fresh = msgspec.structs.replace(telemetry, time=datetime.now(UTC), seq=cycle + 1)
        data, headers = encode(fresh)
        await nc.publish(subjects.telemetry(fresh.node), data, headers=headers)
        return 1

    await paced(send, nodes, INTERVAL_S, tally)


SLOW_SAID = 3
"""The slowest keys, each with what ran while it waited."""


def _overlaps(
    wait: tuple[str, float, float],
    collections: list[tuple[int, float, float]],
    builds: list[tuple[float, float]],
) -> str:
    """A key's wait in words: how long, and the collections and board builds within it."""
    key, began, ended = wait

    def within(b: float, e: float) -> float:
        return max(0.0, min(e, ended) - max(b, began)) * 1000

    full = sum(within(b, e) for g, b, e in collections if g == 2)
    young = sum(within(b, e) for g, b, e in collections if g < 2)
    built = sum(within(b, e) for b, e in builds)
    return (
        f"{key} {(ended - began) * 1000:.0f} ms (full collections {full:.0f} ms, younger "
        f"{young:.0f} ms, a board building {built:.0f} ms)"
    )


async def measure(url: str, nodes: int, window: float, presses: int, tally: Path) -> dict[str, Any]:
    import nats
    from textual.widgets import ContentSwitcher, Input

    from placewatch.consumer.fleet import FleetView, Message
    from placewatch.consumer.watch.board import Board
    from placewatch.consumer.watch.console import Console
    from placewatch.consumer.watch.watched import Taken, Watched
    from placewatch.schemas import NodeTelemetry

    received = 0

    def count(message: Message) -> None:
        nonlocal received
        received += isinstance(message, NodeTelemetry)

    # What ran while a key waited: each collection of the cyclic collector (its generation,
    # when, how long) and each board built (in its thread, holding the GIL as it computes).
    collections: list[tuple[int, float, float]] = []
    builds: list[tuple[float, float]] = []
    gc_began = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_began[0] = time.perf_counter()
        else:
            collections.append((info["generation"], gc_began[0], time.perf_counter()))

    nc = await nats.connect(url)
    view = FleetView(nc, on_change=count)
    await view.start()
    watched = Watched(view, url)
    build = watched.build

    def timed_build(taken: Taken) -> Board:
        began = time.perf_counter()
        try:
            return build(taken)
        finally:
            builds.append((began, time.perf_counter()))

    watched.build = timed_build  # type: ignore[method-assign]
    app = Console(watched, every_s=1.0)
    gc.callbacks.append(collected)
    me = psutil.Process()
    # Each frame Textual paints: what the screen shows once it is written (headless, the
    # frame is rendered all the same and only its writing to a terminal is skipped).
    watching: list[Callable[[], bool]] = []
    painted: list[float] = []
    display = app._display

    def _display(screen: object, renderable: object) -> None:
        display(screen, renderable)  # type: ignore[arg-type]
        if renderable is not None and watching and watching[0]():
            painted.append(time.perf_counter())
            watching.clear()

    app._display = _display  # type: ignore[method-assign]
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            deadline = time.monotonic() + 120
            while len(view.shards) < nodes * 4 or len(view.nodes) < nodes:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the view held {len(view.nodes)} of {nodes} nodes in 120 s")
                await pilot.pause(0.5)
            drawn = app.drawn
            while app.drawn < drawn + 2:  # a board with every node on it
                await pilot.pause(0.1)

            states: dict[str, Callable[[], object]] = {
                "down": lambda: app._table().cursor_row,
                "o": lambda: app.sort_by,
                "tab": lambda: app.query_one("#tables", ContentSwitcher).current,
                "enter": lambda: app.pattern,
                "escape": lambda: app.pattern,
            }

            async def until(done: Callable[[], bool]) -> None:
                deadline = time.monotonic() + 10
                while not done():
                    if time.monotonic() > deadline:
                        raise SystemExit("the console did not take the keys before one timed")
                    await asyncio.sleep(0.01)

            async def typed() -> None:
                """`/` and the filter typed, not yet applied (the last cleared first)."""
                if app.pattern:
                    app.simulate_key("escape")
                    await until(lambda: not app.pattern)
                app.simulate_key("slash")
                field = app.query_one("#filter", Input)
                await until(lambda: field.has_focus)
                for char in FILTER:
                    app.simulate_key(char)
                await until(lambda: field.value == FILTER)

            async def applied() -> None:
                await typed()
                app.simulate_key("enter")
                await until(lambda: app.pattern == FILTER)
                await asyncio.sleep(0.2)

            before_each = {"enter": typed, "escape": applied}

            async def timed(key: str) -> list[float]:
                """From the key's press to the first frame painted with what it changed."""
                took = []
                state = states[key]
                for _ in range(presses):
                    if key in before_each:
                        await before_each[key]()
                    before = state()
                    watching.append(lambda: state() != before)  # noqa: B023 - used at once
                    started = time.perf_counter()
                    app.simulate_key(key)
                    while watching:  # noqa: ASYNC110 - polled: the time is the point
                        await asyncio.sleep(0.0005)
                    took.append((painted[-1] - started) * 1000)
                    waits.append((key, started, painted[-1]))
                    await asyncio.sleep(0.2)
                return took

            began = time.time()
            got = received
            late = []
            for _ in range(50):
                started = time.perf_counter()
                await asyncio.sleep(0.01)
                late.append((time.perf_counter() - started - 0.01) * 1000)
            waits: list[tuple[str, float, float]] = []
            keys = {key: await timed(key) for key, _ in KEYS}
            gc.callbacks.remove(collected)
            cpu0, wall0 = sum(me.cpu_times()[:2]), time.monotonic()
            await pilot.pause(window)
            cpu = (sum(me.cpu_times()[:2]) - cpu0) / (time.monotonic() - wall0)
            ended = time.time()
            figures: dict[str, Any] = {
                "sent": sent_between(tally, began, ended),
                "received": received - got,
                "seconds": ended - began,
                "late": statistics.median(late),
                "late_max": max(late),
                "cpu_pct": 100 * cpu,
                "rss_mib": me.memory_info().rss / (1 << 20),
                "drawn": app.drawn,
            }
            for key, took in keys.items():
                figures[key] = statistics.median(took)
                figures[f"{key}_max"] = max(took)
            slow = sorted(waits, key=lambda w: w[1] - w[2])[:SLOW_SAID]
            figures["slow"] = [_overlaps(w, collections, builds) for w in slow]
            full = [(e - b) * 1000 for g, b, e in collections if g == 2]
            figures["full_gc"] = (len(full), max(full, default=0.0))
            return figures
    finally:
        await view.stop()
        await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--window", type=float, default=20, help="seconds of CPU measured")
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--publish", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--tally", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        asyncio.run(publish(args.publish, args.nodes[0], Tally(args.tally)))
        return 0
    every_offered = True
    for nodes in args.nodes:
        with nats_server(jetstream=False) as url, tempfile.TemporaryDirectory() as where:
            tally = Path(where) / "tally"
            publisher = subprocess.Popen(
                [
                    *(sys.executable, "-m", "bench.console", "--publish", url),
                    *("--nodes", str(nodes), "--tally", str(tally)),
                ]
            )
            try:
                m = asyncio.run(measure(url, nodes, args.window, args.presses, tally))
            finally:
                publisher.terminate()
                publisher.wait()
        load = offered(
            "telemetry messages",
            asked_per_s=nodes / INTERVAL_S,
            sent=int(m["sent"]),
            window_s=m["seconds"],
            received=int(m["received"]),
        )
        every_offered &= load.met
        said = [
            f"{nodes} nodes x 8 GPUs, 4 shards each ({nodes * 4} shards), telemetry every 2 s:",
            f"  the event loop: a 10 ms sleep wakes {m['late']:.1f} ms late (median), "
            f"{m['late_max']:.1f} max",
        ]
        within = True
        for key, what in KEYS:
            median, most = m[key], m[f"{key}_max"]
            within &= median <= TARGET_MS and most <= TARGET_MAX_MS
            said.append(
                f"  {key} ({what}), key to screen: {median:.0f} ms median, {most:.0f} max; "
                f"target {TARGET_MS:.0f} / {TARGET_MAX_MS:.0f} ms: "
                f"{median / TARGET_MS:.2f}x / {most / TARGET_MAX_MS:.2f}x"
            )
        said += [
            f"  CPU {m['cpu_pct']:.0f} % of a core over {args.window:g} s "
            f"(target at most 100 %), RSS {m['rss_mib']:.0f} MiB, {m['drawn']:.0f} boards drawn",
            f"  full collections while keys were timed: {m['full_gc'][0]}, longest "
            f"{m['full_gc'][1]:.0f} ms; slowest keys: {'; '.join(m['slow'])}",
            f"  keys {'within' if within else 'NOT within'} their targets; {load.line()} "
            f"(load {os.getloadavg()[0]:.2f})",
        ]
        print("\n".join(said), flush=True)
    return 0 if every_offered else 1


if __name__ == "__main__":
    sys.exit(main())
