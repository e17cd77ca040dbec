"""`placewatch run --metrics-listen`: the node's own GPUs, shards and health on /metrics,
under the fleet exporter's names and labels (placewatch/prometheus/), from the last tick's
sample: a scrape reads no GPU tool, and costs the worker only the families' building and
formatting (docs/benchmarks.md).

The scrape runs in the metrics server's thread; it reads the tick's sample, the shards'
statuses (their pods and staleness) and the inventory (the GPUs no tool read this tick),
immutable values the tick loop swaps in by reference (`Latest.scraped`, `Latest.statuses`,
`Latest.inventory`; worker/latest.py), and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from placewatch.prometheus import server
from placewatch.prometheus.exposition import Family
from placewatch.prometheus.families import Families
from placewatch.prometheus.listen import listen_argument

from .config import ConfigError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .latest import Latest


class NodeCollector:
    """The node's families, from the sample `latest` holds at each scrape (none before the
    worker's first tick)."""

    def __init__(self, latest: Latest, clock: Callable[[], float] = time.time) -> None:
        self.latest = latest
        self.clock = clock

    def collect(self) -> Iterator[Family]:
        families = Families()
        scraped = self.latest.scraped
        if scraped is not None:
            telemetry, sample, at = scraped
            now = self.clock()
            families.add(
                telemetry,
                sample,
                max(now - at, 0.0),
                statuses=self.latest.statuses,  # a tuple the tick swaps in, never changes
                inventory=self.latest.inventory,  # used where it is the one telemetry names
                now=datetime.fromtimestamp(now, UTC),
            )
        yield from families


def serve_node(listen: str, latest: Latest) -> tuple[WSGIServer, NodeCollector]:
    """/metrics of the node at `listen`, from a thread of the server's own, answering from
    `latest` (empty until the worker's first tick), and its collector; ConfigError says why it
    cannot listen there."""
    where = listen_argument(listen)
    collector = NodeCollector(latest)
    try:
        served, _ = server.serve(where.host, where.port, collector.collect)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-listen {listen}: cannot serve there ({exc.strerror or exc}); give a "
            "free port on an address of this host"
        ) from None
    return served, collector
