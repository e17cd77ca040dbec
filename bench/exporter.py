"""What `placewatch exporter` costs while it serves a fleet: memory between scrapes and during
one, CPU and wall of a scrape, and the bytes of /metrics, at each N of a ladder.

A real nats-server; a publisher process sending N simulated 8-GPU nodes (16 shards, 64
processes each: bench/synthetic.py) as workers do, each node's inventory once and its lean
telemetry every 2 s; `placewatch exporter` as its own process (with `--partitions P`, P of
them, one a partition of the servers' mapping), following the bus. Each step, measured on
each exporter's process, side by side:

- between scrapes: its RSS while it only follows the bus (the largest of the window's
  samples, every 0.25 s), and its CPU meanwhile;
- during a scrape: its peak RSS over the scrape (VmHWM, reset through /proc/PID/clear_refs
  just before it), against between (the target: at most 1.5x); the scrape's wall time
  (Prometheus's default timeout: 10 s), the exporter's CPU over it, and that less what
  following the bus cost over the same time; /metrics in bytes, plain and gzip (asked as
  Prometheus asks: OpenMetrics, gzip);
- the load: the telemetry the publisher sent over the step, against N/2 a second
  (bench/load.py); a step under 95 % of it did not measure N nodes: it fails, and the script
  exits 1.

    python bench/exporter.py [--nodes 1000,5000,10000] [--partitions P] [--idle 10]
                             [--scrapes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import Tally, offered, paced, sent_between  # noqa: E402
from bench.servers import free_port, nats_server, placewatch_cmd  # noqa: E402
from bench.synthetic import node_messages  # noqa: E402
from placewatch.schemas.partitions import partition_of, server_config  # noqa: E402

INTERVAL_S = 2.0
MIB = 1 << 20


async def publish(url: str, nodes: int, tally: Tally) -> None:
    """Each node's inventory, then its telemetry every INTERVAL_S, spread over the interval,
    counted in `tally`; every 15th interval its inventory again (an exporter started late
    asks no node)."""
    import nats

    from placewatch.schemas import encode, subjects

    nc = await nats.connect(url)
    fleet = [node_messages(f"gpu-{j:05d}") for j in range(nodes)]
    for inventory, _ in fleet:
        data, headers = encode(inventory)
        await nc.publish(subjects.inventory(inventory.node), data, headers=headers)

    async def send(j: int, cycle: int) -> int:
        inventory, telemetry = fleet[j]
        fresh = msgspec.structs.replace(telemetry, time=datetime.now(UTC), seq=cycle + 1)
        data, headers = encode(fresh)
        await nc.publish(subjects.telemetry(fresh.node), data, headers=headers)
        if cycle % 15 == 14:
            data, headers = encode(inventory)
            await nc.publish(subjects.inventory(inventory.node), data, headers=headers)
        return 1

    await paced(send, nodes, INTERVAL_S, tally)


PEAK_TARGET = 1.5
"""At most 1.5x the memory between scrapes during one."""
TIMEOUT_S = 10.0
"""Prometheus's default scrape timeout."""
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
"""What Prometheus 2.42 sends: OpenMetrics first."""


def scrape(url: str) -> tuple[float, bytes, int]:
    """(seconds, the plain body, its gzip bytes on the wire) of one scrape, asked as
    Prometheus asks."""
    request = urllib.request.Request(
        url, headers={"Accept-Encoding": "gzip", "Accept": PROMETHEUS_ACCEPT}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as r:
        body = r.read()
    took = time.perf_counter() - started
    assert r.headers.get("Content-Encoding") == "gzip", r.headers
    return took, gzip.decompress(body), len(body)


def cpu_s(proc: psutil.Process) -> float:
    return float(sum(proc.cpu_times()[:2]))


def reset_peak(proc: psutil.Process) -> None:
    Path(f"/proc/{proc.pid}/clear_refs").write_text("5")


def peak_rss(proc: psutil.Process) -> int:
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/PID/status")


def following(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """(largest RSS, CPU seconds a second) over `seconds` of following only."""
    cpu0, wall0 = cpu_s(proc), time.monotonic()
    rss = proc.memory_info().rss
    while time.monotonic() - wall0 < seconds:
        time.sleep(0.25)
        rss = max(rss, proc.memory_info().rss)
    return rss, (cpu_s(proc) - cpu0) / (time.monotonic() - wall0)


def wait_nodes(url: str, nodes: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = scrape(url)[1].count(b"placewatch_node_up{")
            if seen >= nodes:
                return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"the exporter served {seen} of {nodes} nodes after {timeout:g} s")


def measure(proc: psutil.Process, url: str, args: argparse.Namespace) -> dict[str, float]:
    """One exporter's figures (module docstring), once it serves its nodes."""
    between, following_cpu = following(proc, args.idle)
    walls, cpus, peaks = [], [], []
    for _ in range(args.scrapes):
        following(proc, 2.0)  # the last scrape's garbage let go
        reset_peak(proc)
        cpu0 = cpu_s(proc)
        took, body, wire = scrape(url)
        cpus.append(cpu_s(proc) - cpu0)
        peaks.append(peak_rss(proc))
        walls.append(took)
        served = body.count(b"placewatch_node_up{")
    wall = statistics.median(walls)
    return {
        "nodes": served,
        "between": between / MIB,
        "peak": max(peaks) / MIB,
        "wall": wall,
        "wall_max": max(walls),
        "cpu": statistics.median(cpus),
        "scrape_cpu": statistics.median(cpus) - following_cpu * wall,
        "following_pct": 100 * following_cpu,
        "plain": len(body) / MIB,
        "gzip": wire / MIB,
    }


def start_exporter(url: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """`placewatch exporter` following `url`, quiet; with its /metrics URL."""
    port = free_port()
    command = [*placewatch_cmd(), "exporter", "--nats", url, "--listen", f"127.0.0.1:{port}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLACEWATCH_")}
    proc = subprocess.Popen([*command, *extra], env=env, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}/metrics"


def step(url: str, nodes: int, args: argparse.Namespace) -> tuple[list[dict[str, float]], Any]:
    """N nodes published, P exporters: each one's figures, and the load offered."""
    with tempfile.TemporaryDirectory() as where:
        tally = Path(where) / "tally"
        publisher = subprocess.Popen(
            [
                *(sys.executable, __file__, "--publish", url),
                *("--nodes", str(nodes), "--tally", str(tally)),
            ]
        )
        exporters: list[tuple[subprocess.Popen[bytes], str]] = []
        try:
            for p in range(args.partitions):
                part = ("--partition", f"{p}/{args.partitions}") if args.partitions > 1 else ()
                exporters.append(start_exporter(url, *part))
            for p, (_, metrics) in enumerate(exporters):
                wait_nodes(
                    metrics,
                    sum(partition_of(f"gpu-{j:05d}", args.partitions) == p for j in range(nodes)),
                )
            began = time.time()
            results = [measure(psutil.Process(e.pid), metrics, args) for e, metrics in exporters]
            ended = time.time()
            sent = sent_between(tally, began, ended)
        finally:
            for exporter, _ in exporters:
                exporter.terminate()
                exporter.wait(10)
            publisher.terminate()
            publisher.wait(10)
    load = offered(
        "telemetry messages", asked_per_s=nodes / INTERVAL_S, sent=sent, window_s=ended - began
    )
    return results, load


HEADER = (
    f"{'nodes':>6} {'part':>4} {'served':>6} {'between':>8} {'during':>8} {'ratio':>5} "
    f"{'wall':>7} {'max':>7} {'cpu':>6} {'less':>6} {'follow':>6} {'plain':>8} {'gzip':>6}"
)


def row(nodes: int, p: str, r: dict[str, float]) -> str:
    return (
        f"{nodes:>6} {p:>4} {r['nodes']:>6.0f} {r['between']:>5.0f} MiB {r['peak']:>4.0f} MiB "
        f"{r['peak'] / r['between']:>5.2f} {r['wall']:>6.2f}s {r['wall_max']:>6.2f}s "
        f"{r['cpu']:>5.2f}s {r['scrape_cpu']:>5.2f}s {r['following_pct']:>5.1f}% "
        f"{r['plain']:>4.0f} MiB {r['gzip']:>4.1f}M"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000,10000", help="the ladder of N")
    parser.add_argument(
        "--partitions", type=int, default=1, help="P exporters, one a partition of the mapping"
    )
    parser.add_argument("--idle", type=float, default=10, help="seconds following, no scrape")
    parser.add_argument("--scrapes", type=int, default=3, help="scrapes measured a step")
    parser.add_argument("--publish", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--tally", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        asyncio.run(publish(args.publish, int(args.nodes), Tally(args.tally)))
        return 0
    steps = [int(n) for n in args.nodes.split(",")]
    print(
        f"placewatch exporter: N nodes x 8 GPUs, 16 shards each, telemetry every {INTERVAL_S:g} s "
        f"(N/2 messages a second offered), {args.partitions} exporter(s), one a partition; "
        f"{args.idle:g} s following, then {args.scrapes} scrapes a step (median; during: the "
        f"largest peak), asked as Prometheus asks; targets: during at most {PEAK_TARGET:g}x "
        f"between, wall within {TIMEOUT_S:g} s (load {os.getloadavg()[0]:.2f} at start)"
    )
    print("  cpu: the exporter's over a scrape; less: that less following the bus meanwhile")
    print(HEADER)
    failed = False
    with tempfile.TemporaryDirectory() as where:
        config = Path(where) / "nats.conf"
        mapped = args.partitions > 1
        config.write_text(server_config("placewatch", args.partitions) if mapped else "")
        with nats_server("-c", str(config), jetstream=False) as url:
            for nodes in steps:
                results, load = step(url, nodes, args)
                for p, r in enumerate(results):
                    print(row(nodes, f"{p}/{args.partitions}" if mapped else "all", r), flush=True)
                print(f"{nodes:>6}  {load.line()} (load {os.getloadavg()[0]:.2f})", flush=True)
                failed |= not load.met
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
