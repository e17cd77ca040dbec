"""Fan-in: N simulated 8-GPU nodes publishing telemetry at 1 Hz into one FleetView.

One nats-server and one consumer process, placewatch.consumer.FleetView as
a gateway runs it, all on this machine. As deployed, the server keeps the
worker's streams PLACEWATCH_TELEMETRY and PLACEWATCH_INVENTORY (file
storage, the last message per subject); `--no-stream` leaves JetStream out,
core NATS only. The nodes are simulated by publisher processes on bare
sockets (bench/fan_in_nodes.py: each node's telemetry once a second, 3.7 KB
of JSON, stamped when sent), and the consumer takes each message's age (the
time its on_change sees it, minus the message time) and counts drops: seq
gaps, slow-consumer errors, disconnections, nodes never heard from.

For each N of the ladder: a fresh consumer, a warm-up, a measured window
(the same seconds of the clock for the publishers and the consumers). The
publishers count what they sent inside the window: a step whose publishers
sent under 95 % of N messages a second in it (bench/load.py) did not offer
its load and fails, whatever its ages. The ladder stops at the first N whose
p99 age reaches 1 s, that drops anything or that was not offered, or at --max.

With `--partitions P` the server runs the partition mapping (placewatch.schemas.partitions,
as compose/nats.conf does) and P consumer processes each take one partition with
FleetView(partition=p, partitions=P), as a fleet too big for one consumer is read: each
prints its own row (its nodes, its p99, its CPU a message), and a step passes when every
partition does. On this 2-core machine the P consumers share the cores with the server and
the publishers, so the total held says little; what a partition costs does.

    python bench/fan_in.py [--max N] [--ladder N,N,...] [--publishers P]
                           [--warmup S] [--measure S] [--no-stream] [--partitions P]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psutil

if TYPE_CHECKING:
    from bench.load import Offered

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fan_in_nodes import INTERVAL_S, node_name, publish, session_of  # noqa: E402

LADDER = (1000, 2500, 5000, 7500, 10000, 12500, 15000, 17500, 20000, 25000, 30000)
DEFAULT_MAX = 20000
TARGET_NODES = 12500


# ---- the consumer process: a FleetView, measured ----


async def consume(
    url: str, nodes: int, *, partition: int | None, partitions: int
) -> dict[str, Any]:
    """A FleetView's figures over the window the step writes on stdin once this prints
    `ready`: `FROM TO`, two times of time.time()."""
    import nats

    from placewatch.consumer import FleetView, Message
    from placewatch.schemas import NodeTelemetry
    from placewatch.schemas.partitions import partition_of

    session = session_of(nodes)
    if partition is not None:  # the nodes the mapping puts in this partition
        nodes = sum(partition_of(node_name(j), partitions) == partition for j in range(nodes))

    problems = {"slow_consumer": 0, "disconnected": 0, "errors": 0}
    state = {"measuring": False, "gaps": 0, "received": 0}

    async def error(exc: Exception) -> None:
        if state["measuring"]:
            key = "slow_consumer" if "slow consumer" in str(exc).lower() else "errors"
            problems[key] += 1

    async def disconnected() -> None:
        if state["measuring"]:
            problems["disconnected"] += 1

    nc = await nats.connect(url, error_cb=error, disconnected_cb=disconnected)
    last_seq: dict[str, int] = {}
    ages: list[float] = []

    def on_change(message: Message) -> None:
        if not isinstance(message, NodeTelemetry) or message.session != session:
            return  # an earlier step's, read from the stream
        now = time.time()
        before = last_seq.get(message.node)
        last_seq[message.node] = message.seq
        if state["measuring"]:
            state["received"] += 1
            ages.append(now - message.time.timestamp())
            if before is not None and message.seq > before + 1:
                state["gaps"] += message.seq - before - 1

    view = FleetView(
        nc,
        on_change=on_change,
        fill_timeout=1.0,
        partition=partition,
        partitions=None if partition is None else partitions,
    )
    await view.start()
    print("ready", flush=True)
    window = await anyio.to_thread.run_sync(sys.stdin.readline)
    begin, end = (float(t) for t in window.split())
    await anyio.sleep(begin - time.time())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    state["measuring"] = True
    started = time.time()
    await anyio.sleep(end - started)
    state["measuring"] = False
    wall = time.time() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    await view.stop()
    await nc.close()
    ages.sort()

    def pct(p: float) -> float:
        return ages[min(len(ages) - 1, int(p * len(ages)))] if ages else float("nan")

    return {
        "partition": partition,
        "nodes": nodes,
        "received": state["received"],
        "rate": state["received"] / wall,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "max": ages[-1] if ages else float("nan"),
        "gaps": state["gaps"],
        "silent_nodes": nodes - len(last_seq),
        "undecodable": view.undecodable,
        "cpu_pct": cpu / wall * 100,
        **problems,
    }


# ---- the ladder ----


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def the_server() -> psutil.Process:
    """The nats-server this script started."""
    return next(c for c in psutil.Process().children() if "nats-server" in c.name())


def step(
    url: str, server: psutil.Process, nodes: int, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], Offered]:
    """One N: each consumer's result (one a partition, or one for the whole fleet), and the
    load the publishers offered in the measured window."""
    from bench.load import offered

    publishers, warmup, measure = args.publishers, args.warmup, args.measure
    me = [sys.executable, str(Path(__file__).resolve())]
    takes = [str(p) for p in range(args.partitions)] if args.partitions else ["all"]
    consumers = [
        subprocess.Popen(
            [
                *me,
                *("--consumer", url, "--nodes", str(nodes)),
                *("--partition", take, "--partitions", str(args.partitions or 1)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for take in takes
    ]
    pubs: list[subprocess.Popen[str]] = []
    try:
        for consumer in consumers:
            assert consumer.stdout is not None
            if consumer.stdout.readline().strip() != "ready":
                raise RuntimeError("a consumer did not start")
        server_cpu = cpu_seconds(server)
        start = time.time() + 2.0  # the publishers build their templates meanwhile
        window = (start + warmup, start + warmup + measure)
        for consumer in consumers:
            assert consumer.stdin is not None
            consumer.stdin.write(f"{window[0]!r} {window[1]!r}\n")
            consumer.stdin.flush()
        seconds = int(warmup + measure + 3)
        for i in range(publishers):
            pubs.append(
                subprocess.Popen(
                    [
                        *me,
                        *("--publisher", url, "--nodes", str(nodes), "--index", str(i)),
                        *("--count", str(publishers), "--start", repr(start)),
                        *("--seconds", str(seconds), "--window", f"{window[0]!r},{window[1]!r}"),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        results: list[dict[str, Any]] = []
        for consumer in consumers:
            assert consumer.stdout is not None
            results.append(json.loads(consumer.stdout.readline()))
            consumer.wait(30)
        sent = in_window = 0
        late = 0.0
        for p in pubs:
            out, _ = p.communicate(timeout=seconds + 30)
            said = json.loads(out)
            sent += said["sent"]
            in_window += said["in_window"]
            late = max(late, said["late_max_s"])
        server_us = (cpu_seconds(server) - server_cpu) / max(sent, 1) * 1e6
        for result in results:
            result["publisher_late_max_s"] = late
            result["server_us"] = server_us
            result["consumer_us"] = result["cpu_pct"] / 100 / max(result["rate"], 1) * 1e6
        load = offered(
            "telemetry messages",
            asked_per_s=nodes / INTERVAL_S,
            sent=in_window,
            window_s=measure,
            received=sum(r["received"] for r in results),
        )
        return results, load
    finally:
        for p in [*consumers, *pubs]:
            if p.poll() is None:
                p.kill()
                p.wait()


def dropped(r: dict[str, Any]) -> int:
    return int(
        r["gaps"] + r["slow_consumer"] + r["disconnected"] + r["silent_nodes"] + r["undecodable"]
    )


async def make_streams(url: str) -> None:
    """The streams as the worker makes them where it may (file storage, one replica): they
    take the mapped subjects too, so they serve partitioned views as they are deployed."""
    import nats

    from placewatch.schemas.streams import INVENTORY, TELEMETRY
    from placewatch.worker.bus.streams import StreamSettings, ensure_stream

    nc = await nats.connect(url)
    try:
        for stream in (TELEMETRY, INVENTORY):
            await ensure_stream(nc.jetstream(), stream, StreamSettings())
    finally:
        await nc.close()


HEADER = (
    f"{'nodes':>6}{'part':>5}{'held':>7}{'recv/s':>9}{'p50 age':>9}{'p99 age':>9}"
    f"{'max age':>9}{'dropped':>9}{'consumer CPU':>14}{'us/msg':>8}{'server us/msg':>15}"
    f"{'pub late':>10}  ok"
)


def held(r: dict[str, Any]) -> bool:
    """A consumer kept up: its p99 age under 1 s and nothing dropped."""
    return bool(r["p99"] < 1.0 and dropped(r) == 0)


def row(nodes: int, r: dict[str, Any]) -> str:
    part = "all" if r["partition"] is None else r["partition"]
    return (
        f"{nodes:>6}{part:>5}{r['nodes']:>7}{r['rate']:>9.0f}"
        f"{r['p50'] * 1e3:>7.0f}ms{r['p99'] * 1e3:>7.0f}ms"
        f"{r['max'] * 1e3:>7.0f}ms{dropped(r):>9}{r['cpu_pct']:>13.0f}%"
        f"{r['consumer_us']:>8.1f}{r['server_us']:>15.1f}"
        f"{r['publisher_late_max_s'] * 1e3:>8.0f}ms  {'yes' if held(r) else 'no'}"
    )


def ladder(args: argparse.Namespace) -> None:
    from bench.servers import nats_server
    from placewatch.schemas.partitions import server_config

    steps = [int(n) for n in args.ladder.split(",")] if args.ladder else list(LADDER)
    steps = [n for n in steps if n <= args.max]
    views = f"{args.partitions} FleetViews, one a partition" if args.partitions else "one FleetView"
    print(
        f"fan-in: 8-GPU nodes at 1 Hz into {views}, {args.publishers} publisher "
        f"processes, {args.warmup:g} s warm-up, {args.measure:g} s measured per step, "
        f"{'core NATS only' if args.no_stream else 'the telemetry and inventory streams on'} "
        f"(load {os.getloadavg()[0]:.2f} at start)"
    )
    print(HEADER)
    best = 0
    with tempfile.TemporaryDirectory() as where:
        config = Path(where) / "nats.conf"
        config.write_text(server_config("placewatch", args.partitions) if args.partitions else "")
        with nats_server("-c", str(config), jetstream=not args.no_stream) as url:
            if not args.no_stream:
                anyio.run(make_streams, url, backend="asyncio")
            server = the_server()
            for nodes in steps:
                results, load = step(url, server, nodes, args)
                for r in results:
                    print(row(nodes, r), flush=True)
                print(f"{nodes:>6}  {load.line()} (load {os.getloadavg()[0]:.2f})", flush=True)
                if not all(held(r) for r in results):
                    for r in results:
                        detail = {k: r[k] for k in ("gaps", "slow_consumer", "disconnected")}
                        print(f"        drops: {detail}, silent nodes {r['silent_nodes']}")
                if not (load.met and all(held(r) for r in results)):
                    break
                best = nodes
    print(
        f"largest N offered at 1 Hz with p99 age under 1 s and nothing dropped: {best} "
        f"({best / TARGET_NODES:.2f} of the {TARGET_NODES} target; load {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=DEFAULT_MAX, help="largest N tried")
    parser.add_argument("--ladder", help="N values, comma-separated (default: a ladder to --max)")
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--measure", type=float, default=15.0)
    parser.add_argument(
        "--no-stream", action="store_true", help="core NATS only: no telemetry stream"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="run the servers' partition mapping with P partitions, one FleetView each",
    )
    parser.add_argument("--partition", help=argparse.SUPPRESS)
    parser.add_argument("--consumer", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--publisher", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--window", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consumer:
        partition = None if args.partition in (None, "all") else int(args.partition)
        view = functools.partial(consume, partition=partition, partitions=args.partitions)
        result = anyio.run(view, args.consumer, args.nodes, backend="asyncio")
        print(json.dumps(result), flush=True)
    elif args.publisher:
        publish(
            args.publisher,
            nodes=args.nodes,
            index=args.index,
            count=args.count,
            start=args.start,
            seconds=args.seconds,
            window=(float(args.window.split(",")[0]), float(args.window.split(",")[1])),
        )
    else:
        ladder(args)


if __name__ == "__main__":
    main()
