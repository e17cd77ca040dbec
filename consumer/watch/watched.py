"""A view's state as the board reads it, cheaply enough to redraw each second at 10,000 nodes:
each node's telemetry is decoded once per message and its inventory once per change (never
joined), and the GPUs two live nodes report are worked out from the inventories' uuids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

import msgspec

from placewatch.schemas import ComputeStatus

from .. import capacity
from ..held import Held, Holdings, decode_held
from ..snapshot import FleetState
from .board import Board, NodeLook, ShardRow, build, look, shard_row

SHARED_EVERY_S = 10.0
"""How often the GPUs two nodes report are looked for: their inventories rarely change."""
SHARED_NAMED = 3
"""The other nodes a shared GPU's sentence names; the rest are counted."""
HISTORY = 20
"""Verdict changes kept per shard for its detail pane."""
PAUSE_EVERY = 1024
"""Nodes and shards a build takes between two calls of Watched.pause."""


def _no_pause() -> None:
    pass


class GpuId(msgspec.Struct, frozen=True, gc=False):
    """A GPU of an inventory as capacity.shared_among reads it; untracked by the garbage
    collector, as 80,000 of them are held at 10,000 nodes."""

    index: int
    uuid: str | None = None


class InventoryGpus(msgspec.Struct, frozen=True, gc=False):
    """An inventory's GPUs as GpuIds, decoded from it alone: its processes (most of its
    bytes) are skipped, not built."""

    gpus: list[GpuId] = []


class Change(NamedTuple):
    time: datetime
    verdict: str
    stale: bool
    reason: str


class Taken(NamedTuple):
    """What a view held at one moment, copied on its event loop: the board is built from it
    in any thread while the view takes messages on."""

    holdings: Holdings
    statuses: list[ComputeStatus]
    since: dict[tuple[str, str], datetime]
    problems: list[str]


class Watched:
    """`state` (a FleetView's), read into boards; `where`: the bus as the header names it.
    `take` runs on the view's event loop; `build` anywhere, one call at a time. Each
    shard's row and verdicts are kept from one board to the next, unless `once`: one look
    builds one board."""

    def __init__(
        self,
        state: FleetState,
        where: str = "",
        clock: Callable[[], float] = time.time,
        *,
        once: bool = False,
    ) -> None:
        self.state = state
        self.where = where
        self.clock = clock
        self.once = once
        self._looks: dict[str, tuple[Held, NodeLook]] = {}
        self._gpus: dict[str, tuple[Held, tuple[GpuId, ...]]] = {}
        self._shared: dict[str, list[str]] = {}
        self._shared_at = -SHARED_EVERY_S
        self.history: dict[tuple[str, str], tuple[Change, ...]] = {}
        self._rows: dict[tuple[str, str], ShardRow] = {}
        self.pause: Callable[[], None] = _no_pause
        """Called every PAUSE_EVERY nodes and shards of a build: the console's keys come
        first (it waits while one is answered)."""
        self._made = 0

    def take(self) -> Taken:
        s = self.state
        return Taken(s.holdings(), list(s.shards.values()), dict(s.fallback_since), s.problems())

    def board(self) -> Board:
        """The board now, taken and built at once (on the view's event loop)."""
        return self.build(self.take())

    def build(self, taken: Taken) -> Board:
        now = self.clock()
        looks = self._node_looks(taken.holdings.nodes, taken.holdings.inventories)
        board = build(
            looks, taken.statuses, taken.since, now, shard_row if self.once else self._row
        )
        if len(self._rows) > len(taken.statuses):  # shards let go: forget their rows too
            kept = {(s.node, s.shard) for s in taken.statuses}
            self._rows = {k: r for k, r in self._rows.items() if k in kept}
            self.history = {k: h for k, h in self.history.items() if k in kept}
        shared = self._shared
        if now - self._shared_at >= SHARED_EVERY_S:
            live = [n.node for n in board.nodes if not n.silent]
            shared = self._shared = self._shared_gpus(taken.holdings.inventories, live)
            self._shared_at = now
        if shared:
            nodes = [
                n._replace(problems=(*n.problems, *shared[n.node])) if n.node in shared else n
                for n in board.nodes
            ]
            nodes.sort(key=lambda n: (not n.problems, n.node))
            board = board._replace(nodes=nodes)
        return board

    def _row(self, s: ComputeStatus, since: datetime, silent: bool, blind: bool) -> ShardRow:
        """shard_row, made again only when the status, its since, its node's silence or its
        blindness changed: most of 40,000 shards' rows stay from one board to the next."""
        self._made += 1
        if not self._made % PAUSE_EVERY:
            self.pause()
        key = (s.node, s.shard)
        held = self._rows.get(key)
        if held is None or held.status is not s:
            self._note(key, s)
        if (
            held is None
            or held.status is not s
            or (held.since, held.silent, held.blind) != (since, silent, blind)
        ):
            held = self._rows[key] = shard_row(s, since, silent, blind)
        return held

    def look(self, node: str) -> NodeLook | None:
        held = self._looks.get(node)
        return None if held is None else held[1]

    def _node_looks(self, nodes: dict[str, Held], inventories: dict[str, Held]) -> list[NodeLook]:
        looks = []
        for node, held in nodes.items():
            self._made += 1
            if not self._made % PAUSE_EVERY:
                self.pause()
            cached = self._looks.get(node)
            if cached is None or cached[0] is not held:
                cached = (held, look(node, held, inventories.get(node)))
                self._looks[node] = cached
            looks.append(cached[1])
        if len(self._looks) > len(looks):  # a node let go (forgotten)
            self._looks = {n: c for n, c in self._looks.items() if n in nodes}
        return looks

    def _shared_gpus(self, inventories: dict[str, Held], live: list[str]) -> dict[str, list[str]]:
        """Node -> a sentence for each of its GPUs that another live node reports too (two
        workers watch one machine under two names), from each inventory's GPUs, decoded once
        per inventory."""
        for node in live:
            held = inventories.get(node)
            cached = self._gpus.get(node)
            if held is not None and (cached is None or cached[0] is not held):
                gpus = decode_held(held, InventoryGpus).gpus
                self._gpus[node] = (held, tuple(gpus))
        if len(self._gpus) > len(inventories):  # a node let go (forgotten)
            self._gpus = {n: c for n, c in self._gpus.items() if n in inventories}
        said: dict[str, list[str]] = {}
        held_gpus = ((node, self._gpus[node][1]) for node in live if node in self._gpus)
        for shared in capacity.shared_among(held_gpus):
            on = list(zip(shared.nodes, shared.gpus, strict=True))
            for node, index in on:
                named = (f"{n} GPU {i}" for n, i in on if n != node)  # a few: O(n), not n**2
                others = [next(named) for _ in range(min(len(on) - 1, SHARED_NAMED))]
                if len(on) - 1 > SHARED_NAMED:
                    others.append(f"{len(on) - 1 - SHARED_NAMED} more")
                said.setdefault(node, []).append(
                    f"SHARED GPU {index} ({shared.uuid}) is also {', '.join(others)}: two "
                    "workers watch one machine under two names; stop one, or give both one --node"
                )
        return said

    def _note(self, key: tuple[str, str], s: ComputeStatus) -> None:
        """A new status of a shard: its verdict's change, as this console saw it."""
        seen = self.history.get(key)
        if seen is None or (seen[-1].verdict, seen[-1].stale) != (s.verdict, s.stale):
            # tuples of atoms, which the garbage collector stops walking: 40,000 shards'
            # histories would otherwise be in each of its full passes
            change = Change(s.time, s.verdict, s.stale, s.reason)
            self.history[key] = (*(seen or ())[1 - HISTORY :], change)
