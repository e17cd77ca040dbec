"""The fleet as Prometheus metric families, built from a view's holdings at each scrape.

Nothing is kept between scrapes: each one decodes the nodes' latest messages and writes
their families afresh, so a node that stopped sending is gone from the next scrape once its
last sample is older than the stale limit, and a shard whose verdict changed has one series
with the new verdict (Prometheus marks the old one stale at once).

The families come in parts, BATCH nodes at a time, for exposition.stream to join in
`order()`: a scrape holds one batch's rows at a time, not the fleet's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from placewatch.consumer.fleet import Holdings
from placewatch.consumer.unreadable import REASONS
from placewatch.prometheus.exposition import Family
from placewatch.prometheus.families import Families
from placewatch.prometheus.metrics import (
    EXPORTER_SERVES,
    EXPORTER_SERVES_HELP,
    EXPORTER_SERVES_LABELS,
    NODE_CLOCK_OFFSET,
    PARTITION_PROBLEM,
    PARTITION_PROBLEM_HELP,
    UNREADABLE,
    UNREADABLE_HELP,
)
from placewatch.schemas import lean

from .options import STALE_INTERVALS, STALE_MIN_S

BATCH = 50
"""Nodes whose families are built before they are handed on (about 2 MiB of rows for 8-GPU
nodes)."""


def stale_limit(interval_s: float, stale_after: float | None) -> float:
    """Seconds after which a node's last sample is too old to serve."""
    if stale_after is not None:
        return stale_after
    return max(STALE_INTERVALS * interval_s, STALE_MIN_S)


class FleetCollector:
    """Builds every family from `take()`, a view's holdings at this moment.

    `node`: serve that node only. `stale_after`: seconds after which a node's last sample
    leaves /metrics (None: stale_limit's default). `clock`: the time now, in seconds since
    the epoch. `partition_problems`: the kinds of what the view's partition check found
    (consumer/mapping.py). `unreadable`: how many messages the view did not read, by reason
    (consumer/unreadable.py). `serves`: what the exporter serves, as the labels of
    EXPORTER_SERVES (partition `P/N` or "", nodes: the glob or node, or "*")."""

    def __init__(
        self,
        take: Callable[[], Holdings],
        *,
        node: str | None = None,
        stale_after: float | None = None,
        clock: Callable[[], float] = time.time,
        partition_problems: Callable[[], list[str]] = list,
        unreadable: Callable[[], dict[str, int]] = dict,
        serves: tuple[str, str] = ("", "*"),
        batch: int = BATCH,
    ) -> None:
        self.take = take
        self.node = node
        self.stale_after = stale_after
        self.clock = clock
        self.partition_problems = partition_problems
        self.unreadable = unreadable
        self.serves = serves
        self.batch = batch

    @staticmethod
    def order() -> list[str]:
        """The name of every family `collect` may give, in the order they are written."""
        return [*Families().order(), PARTITION_PROBLEM, UNREADABLE, EXPORTER_SERVES]

    def collect(self) -> Iterator[Family]:
        """Every family, in parts: each node's in a batch's, then the exporter's own."""
        holdings = self.take()
        now = self.clock()
        families = Families()
        names = [self.node] if self.node is not None else sorted(holdings.nodes)
        for i, name in enumerate(names):
            if i and i % self.batch == 0:
                yield from families
                families = Families()
            telemetry = holdings.telemetry(name)
            if telemetry is None:
                continue
            held = holdings.nodes[name]
            age = max(now - held.seen, 0.0)
            if age > stale_limit(telemetry.interval_s, self.stale_after):
                continue
            inventory = holdings.inventory(name)
            if inventory is not None and inventory.id != telemetry.inventory:
                inventory = None  # an older one: the node's newer is on its way
            sample = None if inventory is None else lean.join(inventory, telemetry)
            families.add(
                telemetry,
                sample,
                age,
                statuses=holdings.statuses.get(name, ()),
                inventory=inventory,
                now=datetime.fromtimestamp(now + held.clock_offset_s, UTC),
            )
            families.nodes[NODE_CLOCK_OFFSET].add([name], held.clock_offset_s)
        yield from families
        partition = Family(PARTITION_PROBLEM, PARTITION_PROBLEM_HELP, ("kind",))
        for kind in self.partition_problems():
            partition.add([kind], 1.0)
        yield partition
        counted = Family(UNREADABLE, UNREADABLE_HELP, ("reason",), "counter")
        for reason, count in sorted({**dict.fromkeys(REASONS, 0), **self.unreadable()}.items()):
            counted.add([reason], count)
        yield counted
        serves = Family(EXPORTER_SERVES, EXPORTER_SERVES_HELP, EXPORTER_SERVES_LABELS)
        serves.add(self.serves, 1.0)
        yield serves
