"""Whether the servers' partition mapping is the one a view of one partition was told.

A view of partition P of N subscribes to the subjects the mapping makes for P. Told the
wrong N, it would hold the servers' partition P of another N; on servers without the
mapping, nothing at all. Either is a view that looks right and is not, so it checks both:

- each node it takes the first time must be one that `partition_of(node, N)` puts in P:
  the servers put it there (or the stream kept it there), so a node that is not says their
  N is another (or the stream keeps copies from before N changed), but only where another
  N puts every node seen where it was seen. Where none does, the one node is out of place,
  not the mapping: a node's credentials let it publish straight into any partition
  (`telemetry.*.NODE`, which the servers check after mapping), and one that does is no
  reason to tell the operator to change N. Its message is refused and counted (`partition`);
- one message of the unmapped form (`<prefix>.telemetry.<node>`) is asked for: the
  servers deliver it only where they do not map that subject, so its arrival says the
  mapping is off;
- one message of partition N (`<prefix>.telemetry.N.<node>`), one past the last of N, is
  asked for: its arrival says the servers make more partitions than N, where a larger N puts
  every node seen where it was seen (else, again, the one node is out of place). A view told too
  large an N may meet no node at all (partition 3 of 4 where the servers make 2): the views
  of the partitions that do exist say so, by the first check.

Each subscription ends with its one message: on servers that map as the view was told,
neither carries any. Credentials that hold a view to its partition allow both
(docs/consumers.md, Least privilege).

What it finds is in `problems`, logged once, and shown where the view is shown
(`placewatch watch`, `FleetView.snapshot()`; the exporter's placewatch_partition_problem).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from placewatch.schemas import partitions, subjects
from placewatch.schemas.printable import printable

log = logging.getLogger(__name__)

SEE = "docs/operations.md, Partitions"
MAX_N = 1024
"""The largest N a check tries when it asks whether another N fits what it saw: the largest
any command takes (placewatch/arguments.py, MOST_PARTITIONS; this package imports the
contract and nats alone, for a gateway to embed)."""
KINDS = ("unmapped", "more_partitions", "other_partitions", "stream_copies")
"""What a check may find: servers without the mapping, with more partitions than N, with
another number of them, or a stream that keeps nodes where N does not put them."""


class PartitionCheck:
    """The checks of a view of `partition` of `count`."""

    def __init__(self, prefix: str, partition: int, count: int) -> None:
        partitions.check(partition, count)
        self.prefix = prefix
        self.partition = partition
        self.count = count
        self.found: dict[str, str] = {}
        """What the checks found, the first of each kind (KINDS) by kind."""
        self.seen: dict[str, tuple[int, int]] = {}
        """Each node seen, with its hash (partitions.node_hash) and the partition it came in."""
        self.out_of_place: Callable[[str, str], object] = lambda subject, why: None
        """Told of a message of a node in a partition the mapping does not give it, where the
        mapping itself is not in question: its subject and why (FleetView counts it)."""

    @classmethod
    def of(cls, prefix: str, partition: int | None, count: int | None) -> PartitionCheck | None:
        """The check of a view of `partition` of `count` (None for a view of every node), or
        ValueError saying what to give."""
        if partition is None and count is None:
            return None
        if partition is None or count is None:
            raise ValueError(
                f"FleetView(partition={partition}, partitions={count}): give both, the "
                "partition and the N of the servers' mapping, or neither for every node"
            )
        return cls(prefix, partition, count)

    def taken(self, node: str, stored: float | None = None) -> bool:
        """A node the view takes the first time, live (`stored` None) or from a stream: the
        servers put it in the view's partition. False: the node alone is out of place, and
        its message is not to be taken."""
        if self._fits(node, self.partition, self.count):
            return True
        other = self._another_n(range(2, MAX_N + 1))
        ours = partitions.partition_of(node, self.count)
        where = f"in partition {self.partition}, where {self.count} partitions put it in {ours}"
        if other is None:
            self.out_of_place(
                partitions.mapped("telemetry", node, self.count, self.prefix),
                f"node {node!r} came {where}, and the other nodes where {self.count} "
                f"partitions put them: it publishes straight into another partition; refused",
            )
            return False
        if stored is None:
            self._found(
                "other_partitions",
                f"the servers put node {node!r} {where}: their mapping makes another number "
                f"of partitions than {self.count} ({other} puts every node seen where it was "
                f"seen); give its N ({SEE})",
            )
        else:
            self._found(
                "stream_copies",
                f"the stream keeps node {node!r} {where}: the servers' mapping makes another "
                f"number of partitions than {self.count} (give its N), or the stream keeps "
                f"copies from before N changed (purge it; {SEE})",
            )
        return True

    def _fits(self, node: str, partition: int, count: int) -> bool:
        """Note the node seen in `partition`; whether `count` partitions put it there."""
        h = partitions.node_hash(node)
        self.seen[node] = (h, partition)
        return h % count == partition

    def _another_n(self, candidates: Iterable[int]) -> int | None:
        """The first N of `candidates` other than the view's that puts every node seen where
        it was seen, or None. (N = 1, every node in partition 0, fits any view of partition
        0: it is never a candidate.)"""
        seen = list(self.seen.values())
        return next(
            (n for n in candidates if n != self.count and all(h % n == p for h, p in seen)),
            None,
        )

    async def subscribe(self, nc: Client) -> list[Subscription]:
        """Ask for one message of the unmapped telemetry subject, and one of partition N."""
        unmapped = partitions.stream_subjects("telemetry", self.prefix)[0]
        past_n = partitions.consumer_subject("telemetry", self.prefix, self.count)
        return [
            await nc.subscribe(unmapped, cb=self._unmapped, max_msgs=1),
            await nc.subscribe(past_n, cb=self._past_n, max_msgs=1),
        ]

    async def _unmapped(self, msg: Msg) -> None:
        self._found(
            "unmapped",
            f"telemetry came on {msg.subject}, not mapped to a partition: the servers (one "
            f"at least) have no partition mapping for {self.prefix}, so a view of partition "
            f"{self.partition} misses their nodes; turn the mapping on, or watch every node "
            f"without a partition ({SEE})",
        )

    async def _past_n(self, msg: Msg) -> None:
        node = subjects.node_of(msg.subject)
        self._fits(node, self.count, self.count + 1)
        if self._another_n(range(self.count + 1, MAX_N + 1)) is None:
            self.out_of_place(
                msg.subject,
                f"node {node!r} published into partition {self.count}, which no N that puts "
                "the other nodes seen where they are makes: refused",
            )
            return
        self._found(
            "more_partitions",
            f"telemetry came on {msg.subject}, in partition {self.count}: the servers' "
            f"mapping makes more than the {self.count} partitions given, and the nodes past "
            f"them are in no view; give its N ({SEE})",
        )

    @property
    def problems(self) -> list[str]:
        return list(self.found.values())

    def _found(self, kind: str, problem: str) -> None:
        if kind in self.found:
            return
        self.found[kind] = problem
        log.warning("partition %s/%s: %s", self.partition, self.count, printable(problem))
