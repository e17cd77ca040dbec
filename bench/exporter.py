"""What `placewatch exporter` costs while it serves a fleet: RSS, CPU and scrape duration.

A real nats-server; a publisher process sending N simulated 8-GPU nodes (16 shards, 64
processes each: bench/synthetic.py) as workers do, each node's inventory once and its lean
telemetry every 2 s; `placewatch exporter` as its own process, following the bus through a
FleetView. Measured on the exporter's process (psutil):

- idle: RSS and CPU while it only follows the bus (N/2 telemetry messages a second);
- at a 15 s scrape: RSS and CPU with a scrape every 15 s, as Prometheus would;
- back to back: scrapes one after the other, for the scrape's duration (p50, max) and the
  size of /metrics (plain, and gzip as Prometheus asks for it);
- the load: the telemetry the publisher sent over all of it, against N/2 a second
  (bench/load.py); under 95 % of it, the figures are not at N nodes and the script exits 1.

Beside the figures reported for dcgm-exporter on one node (71 to 155 MiB RSS, up to 15-20 %
of a core): the exporter here serves the whole fleet.

    python bench/exporter.py [--nodes 1000] [--idle 30] [--window 60] [--scrapes 10]
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

import msgspec
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import Tally, offered, paced, sent_between  # noqa: E402
from bench.servers import free_port, nats_server, placewatch_cmd  # noqa: E402
from bench.synthetic import node_messages  # noqa: E402

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


SCRAPE_CPU_TARGET_S = 1.0
"""At most 1 s of CPU a scrape of 1,000 nodes on a 2-core machine."""
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
"""What Prometheus 2.42 sends: OpenMetrics first."""


def scrape(url: str) -> tuple[float, int, int]:
    """(seconds, plain bytes, gzip bytes on the wire) of one scrape, asked as Prometheus asks."""
    request = urllib.request.Request(
        url, headers={"Accept-Encoding": "gzip", "Accept": PROMETHEUS_ACCEPT}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as r:
        body = r.read()
    took = time.perf_counter() - started
    plain = gzip.decompress(body) if r.headers.get("Content-Encoding") == "gzip" else body
    return took, len(plain), len(body)


def usage(proc: psutil.Process, seconds: float, every: float | None, url: str) -> dict[str, float]:
    """CPU % of one core and the largest RSS over `seconds`, scraping every `every` s."""
    cpu0, wall0 = sum(proc.cpu_times()[:2]), time.monotonic()
    peak = proc.memory_info().rss
    next_scrape = wall0
    while time.monotonic() - wall0 < seconds:
        if every is not None and time.monotonic() >= next_scrape:
            scrape(url)
            next_scrape += every
        peak = max(peak, proc.memory_info().rss)
        time.sleep(0.25)
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    return {"cpu_pct": 100 * cpu / (time.monotonic() - wall0), "rss_mib": peak / MIB}


def wait_nodes(url: str, nodes: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                text = r.read().decode()
            if text.count("placewatch_node_up{") >= nodes:
                return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"the exporter did not serve {nodes} nodes within {timeout:g} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=30, help="seconds following, no scrape")
    parser.add_argument("--window", type=float, default=60, help="seconds at a 15 s scrape")
    parser.add_argument("--scrapes", type=int, default=10, help="back-to-back scrapes")
    parser.add_argument("--publish", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--tally", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        asyncio.run(publish(args.publish, args.nodes, Tally(args.tally)))
        return 0
    with tempfile.TemporaryDirectory() as where, nats_server(jetstream=False) as url:
        tally = Path(where) / "tally"
        publisher = subprocess.Popen(
            [
                *(sys.executable, __file__, "--publish", url),
                *("--nodes", str(args.nodes), "--tally", str(tally)),
            ]
        )
        port = free_port()
        metrics = f"http://127.0.0.1:{port}/metrics"
        exporter = subprocess.Popen(
            [*placewatch_cmd(), "exporter", "--nats", url, "--listen", f"127.0.0.1:{port}"],
            env={k: v for k, v in os.environ.items() if not k.startswith("PLACEWATCH_")},
        )
        try:
            wait_nodes(metrics, args.nodes)
            proc = psutil.Process(exporter.pid)
            began = time.time()
            idle = usage(proc, args.idle, None, metrics)
            at_15 = usage(proc, args.window, 15.0, metrics)
            cpu0 = sum(proc.cpu_times()[:2])
            took, plain, wire = zip(*(scrape(metrics) for _ in range(args.scrapes)), strict=True)
            scrape_cpu = (sum(proc.cpu_times()[:2]) - cpu0) / args.scrapes
            rss_after = proc.memory_info().rss / MIB
            ended = time.time()
            sent = sent_between(tally, began, ended)
        finally:
            exporter.terminate()
            exporter.wait(10)
            publisher.terminate()
            publisher.wait(10)
    series = plain[-1]
    print(
        f"placewatch exporter, {args.nodes} nodes x 8 GPUs, 16 shards each, telemetry every {INTERVAL_S:g} s"
    )
    print(
        f"  following only ({args.idle:g} s):      RSS {idle['rss_mib']:.0f} MiB, CPU {idle['cpu_pct']:.1f} % of a core"
    )
    print(
        f"  scraped every 15 s ({args.window:g} s): RSS {at_15['rss_mib']:.0f} MiB, CPU {at_15['cpu_pct']:.1f} % of a core"
    )
    print(
        f"  back to back ({args.scrapes} scrapes):  p50 {statistics.median(took) * 1000:.0f} ms, "
        f"max {max(took) * 1000:.0f} ms; RSS after {rss_after:.0f} MiB"
    )
    print(
        f"  a scrape costs the exporter {scrape_cpu:.2f} s of CPU (following the bus meanwhile "
        f"included); target {SCRAPE_CPU_TARGET_S:g} s: {scrape_cpu / SCRAPE_CPU_TARGET_S:.2f}x"
    )
    print(f"  /metrics: {series / MIB:.2f} MiB plain, {wire[-1] / MIB:.2f} MiB gzip")
    print("  dcgm-exporter, as reported, per node: 71-155 MiB RSS, up to 15-20 % of a core")
    load = offered(
        "telemetry messages",
        asked_per_s=args.nodes / INTERVAL_S,
        sent=sent,
        window_s=ended - began,
    )
    print(f"  {load.line()} (load {os.getloadavg()[0]:.2f})")
    return 0 if load.met else 1


if __name__ == "__main__":
    sys.exit(main())
