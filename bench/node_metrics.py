"""What a scrape of `placewatch run --metrics-listen` costs the worker: building the node's
families from the tick's sample and writing them, for 8 GPUs and 64 processes (16 shards of
4), in both formats Prometheus takes (its OpenMetrics Accept header first), side by side with
prometheus_client formatting the same families, and over real HTTP.

    .venv/bin/python -m bench.node_metrics [--scrapes N]

Prints the CPU time a scrape takes (process time, median of N) against the 2 ms target.
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from collections.abc import Callable, Iterator

import msgspec
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from bench.synthetic import node_sample, shard_statuses
from placewatch.prometheus import server
from placewatch.prometheus.exposition import render
from placewatch.schemas import lean
from placewatch.worker.latest import Latest
from placewatch.worker.metrics import NodeCollector

TARGET_MS = 2.0
OPENMETRICS = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"


def collector(gpus: int = 8, shards: int = 16) -> NodeCollector:
    """The node's collector after a tick; each GPU's shards run in one pod, so every GPU
    series carries the pod labels as well as the driver's."""
    sample = node_sample(gpus=gpus, shards=shards)
    latest = Latest()
    _, telemetry = lean.split(sample)
    latest.scraped = (telemetry, sample, time.time())
    latest.statuses = [
        msgspec.structs.replace(
            s, pod_namespace="serving", pod_name=f"model-{i % gpus}", container_name="engine"
        )
        for i, s in enumerate(shard_statuses(sample))
    ]
    return NodeCollector(latest)


def reference(node: NodeCollector) -> CollectorRegistry:
    """The same families as prometheus_client objects (read back from our own output), for
    prometheus_client to format."""
    families = list(
        text_string_to_metric_families(render(node.collect(), openmetrics=False).decode())
    )

    class Parsed:
        def collect(self) -> Iterator[object]:
            return iter(families)

    found = CollectorRegistry(auto_describe=False)
    found.register(Parsed())  # type: ignore[arg-type]
    return found


def cpu_ms(work: Callable[[], object], scrapes: int) -> list[float]:
    times = []
    for _ in range(scrapes):
        started = time.process_time()
        work()
        times.append((time.process_time() - started) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300)
    args = parser.parse_args()
    node = collector()
    text = render(node.collect(), openmetrics=False)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(f"one node of 8 GPUs, 64 processes, 16 shards: {series} series, {len(text)} bytes")
    theirs = reference(node)
    served, _ = server.serve("127.0.0.1", 0, node.collect)
    url = f"http://127.0.0.1:{served.server_port}/metrics"

    def over_http() -> None:
        request = urllib.request.Request(url, headers={"Accept": OPENMETRICS})
        with urllib.request.urlopen(request, timeout=5) as answer:
            answer.read()

    rows = [
        (
            "placewatch, OpenMetrics (what Prometheus asks for)",
            lambda: render(node.collect(), openmetrics=True),
        ),
        ("placewatch, text format 0.0.4", lambda: render(node.collect(), openmetrics=False)),
        (
            "prometheus_client formatting the same families, OpenMetrics",
            lambda: generate_openmetrics(theirs),  # type: ignore[no-untyped-call]
        ),
        ("prometheus_client formatting the same families, text", lambda: generate_latest(theirs)),
        ("over HTTP, server and client in this process (upper bound)", over_http),
    ]
    medians = {}
    try:
        for what, work in rows:
            found = cpu_ms(work, args.scrapes)
            medians[what] = median = statistics.median(found)
            print(
                f"{what}: {median:.2f} ms of CPU a scrape (median of {args.scrapes}; "
                f"max {max(found):.2f}); target {TARGET_MS:g} ms: {median / TARGET_MS:.2f}x"
            )
    finally:
        served.shutdown()
        served.server_close()
    ours, prom = rows[0][0], rows[2][0]
    print(f"prometheus_client / placewatch (OpenMetrics): {medians[prom] / medians[ours]:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
