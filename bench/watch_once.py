"""`placewatch watch --once --json` over a fleet: what one look at the whole fleet costs.

A real nats-server with the worker's streams and compute bucket; N nodes of 8 GPUs and 4
shards (bench/console.py's fleet: one shard in cpu_fallback on every 100th node), their
inventories in the stream and their shards' statuses in the bucket, as workers leave them,
and every node publishing its telemetry every 2 s (bench/console.py's publisher, in a
process of its own). Once every node has published, `placewatch watch --once --json` runs
as a user runs it, `--runs` times: its wall time, its CPU, its peak RSS (getrusage of the
child) and the bytes it printed. What it prints is checked: every node and shard there.
Beside it, the bound under it: the same reads of what the bus keeps (the last inventory and
telemetry of each node, every status) taken alone, in this process, nothing decoded.

The publisher's telemetry over the runs is the load (bench/load.py): under 95 % of N/2 a
second, the figures are not at N nodes and the script exits 1.

`--placewatch` times another install's command: a user's (`pip install .[console]` in a
venv of its own) lacks the test extras, whose LiteLLM brings aiohttp, which nats-py then
imports (0.12 s of every run here).

    .venv/bin/python -m bench.watch_once [--nodes 1000 10000] [--runs 3] [--placewatch PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import nats

from bench.console import INTERVAL_S, console_fleet
from bench.load import offered, sent_between
from bench.servers import nats_server, node_env, placewatch_cmd
from placewatch.retained import last_per_subject
from placewatch.schemas import encode, partitions, subjects
from placewatch.schemas.streams import for_prefix
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream

TARGET_S = 3.0
"""`--once --json` at 10,000 nodes within 3 s."""


async def fill(url: str, nodes: int) -> None:
    """The streams and the compute bucket, each node's inventory and its shards' statuses
    in them, as the node's workers left them."""
    async with await nats.connect(url) as nc:
        js = nc.jetstream()
        stores = for_prefix(subjects.DEFAULT_PREFIX)
        for stream in (stores.telemetry, stores.inventory, stores.events):
            await ensure_stream(js, stream, StreamSettings())
        compute = await ensure_bucket(js, stores.compute, StreamSettings())
        pending = []
        for inventory, _, statuses in console_fleet(nodes):
            data, headers = encode(inventory)
            await nc.publish(subjects.inventory(inventory.node), data, headers=headers)
            for s in statuses:
                pending.append(compute.put(subjects.shard_key(s.node, s.shard), encode(s)[0]))
            if len(pending) >= 512:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        await nc.flush()


class Run(NamedTuple):
    wall_s: float
    cpu_s: float
    peak_mib: float
    printed: int
    nodes: int
    shards: int


def once(url: str, command: list[str]) -> Run:
    """One `placewatch watch --once --json` (`command` is placewatch), timed, its output
    counted."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "watch", "--once", "--json", "--nats", url],
        env=node_env(),
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"watch --once failed ({done.returncode}): {done.stderr.decode().strip()}")
    board = json.loads(done.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(
        wall,
        cpu,
        after.ru_maxrss / 1024,
        len(done.stdout),
        len(board["nodes"]),
        len(board["shards"]),
    )


async def reads(url: str) -> tuple[float, int]:
    """How long reading what the bus keeps takes alone (as a view's fill reads it, nothing
    decoded), and how many messages."""
    stores = for_prefix(subjects.DEFAULT_PREFIX)
    read = [
        (stores.inventory.name, partitions.consumer_subject("inventory")),
        (stores.telemetry.name, partitions.consumer_subject("telemetry")),
        (stores.compute.stream, subjects.kv_subject(stores.compute.name)),
    ]
    async with await nats.connect(url) as nc:
        started = time.perf_counter()
        count = 0
        for stream, subject in read:
            count += len(await last_per_subject(nc, stream, subject, 60, complete=True))
        return time.perf_counter() - started, count


def measure(
    nodes: int, runs: int, command: list[str]
) -> tuple[list[Run], int, float, tuple[float, int]]:
    """`runs` looks at a fleet of `nodes`; the telemetry sent meanwhile and over how long;
    the reads alone."""
    with tempfile.TemporaryDirectory() as where, nats_server() as url:
        tally = Path(where) / "tally"
        asyncio.run(fill(url, nodes))
        publisher = subprocess.Popen(
            [
                *(sys.executable, "-m", "bench.console", "--publish", url),
                *("--nodes", str(nodes), "--tally", str(tally)),
            ]
        )
        try:
            deadline = time.monotonic() + 120
            while sent_between(tally, 0, time.time()) < nodes:  # every node has published
                if publisher.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the publisher did not send {nodes} nodes' telemetry in 120 s")
                time.sleep(0.5)
            time.sleep(INTERVAL_S)
            began = time.time()
            done = [once(url, command) for _ in range(runs)]
            bound = asyncio.run(reads(url))
            ended = time.time()
            return done, sent_between(tally, began, ended), ended - began, bound
        finally:
            publisher.terminate()
            publisher.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--placewatch", metavar="PATH", help="the placewatch to time (default: this venv's)"
    )
    args = parser.parse_args()
    command = [args.placewatch] if args.placewatch else placewatch_cmd()
    every_offered = True
    for nodes in args.nodes:
        done, sent, window, (read_s, read) = measure(nodes, args.runs, command)
        load = offered(
            "telemetry messages", asked_per_s=nodes / INTERVAL_S, sent=sent, window_s=window
        )
        every_offered &= load.met
        wall = statistics.median(r.wall_s for r in done)
        last = done[-1]
        print(
            f"watch --once --json, {nodes} nodes x 8 GPUs, 4 shards each, telemetry every "
            f"{INTERVAL_S:g} s, {args.runs} runs (load {os.getloadavg()[0]:.2f}), "
            f"{command[0]}:\n"
            f"  wall {wall:.2f} s median, {max(r.wall_s for r in done):.2f} max; CPU "
            f"{statistics.median(r.cpu_s for r in done):.2f} s; peak RSS {last.peak_mib:.0f} MiB; "
            f"{last.printed / 1e6:.1f} MB printed: {last.nodes} nodes, {last.shards} shards\n"
            f"  target {TARGET_S:g} s at 10,000 nodes: {wall / TARGET_S:.2f}x; the bound: reading "
            f"what the bus keeps alone ({read:,} messages, nothing decoded) {read_s:.2f} s\n"
            f"  {load.line()}"
        )
        if (last.nodes, last.shards) != (nodes, nodes * 4):
            print(f"  NOT ALL THERE: {nodes} nodes and {nodes * 4} shards asked")
            every_offered = False
    return 0 if every_offered else 1


if __name__ == "__main__":
    sys.exit(main())
