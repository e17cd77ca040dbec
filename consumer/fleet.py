"""The fleet as a gateway sees it: each node's latest sample, each shard's latest status.

A node publishes what it is (NodeInventory) when that changes, and what it reads
(NodeTelemetry) every interval; the view holds the latest of each per node and joins them for
its users (`sample()`, `snapshot()`). A gateway that starts late must know the fleet at once,
not after every node has published again, so `start()` first reads what the bus keeps (kept.py):
the last telemetry and inventory of each node (the prefix's streams, PLACEWATCH_TELEMETRY and
PLACEWATCH_INVENTORY) and every shard's latest status (its KV bucket placewatch_compute). Live
core subscriptions, made before that read, keep the view current. Which message is newer is
never judged by the node's clock, which may be wrong or stepped back (NTP): a live message
replaces what is held (one node's messages arrive in the order it sent them), a copy read from
a stream or bucket only what the view took before the server stored that copy, and a node's
telemetry of one session only that session's earlier telemetry, by its `seq`. Ages are judged
the same way: from when the view took a message (its arrival, or when the server stored a copy
read from a stream), so a node whose clock is behind is not stale and one whose clock is ahead
goes stale when it stops. Telemetry that names an inventory the view does not hold (the stream
lost it, or there is no stream) has the view ask the node's `inventory` endpoint. A fresh
cluster (no stream, no bucket, or no JetStream at all) is an empty fleet. A node `placewatch
forget` says is gone for good (NodeForgotten) is let go, statuses and all. A message that names
another node than its subject's is refused (impostors.py).
After a reconnect the view fills again (core subscriptions keep nothing of what came while the
connection was away) and lets go of what the bus no longer keeps and it has not heard since: a
node forgotten meanwhile, a status deleted.

Held at fleet scale: each node's two messages are kept as the bytes they came in (held.py),
a few KiB per node in objects the garbage collector need not walk.

A view may take one of the partitions the servers' mapping spreads the nodes over
(placewatch.schemas.partitions): then it holds that partition's nodes' telemetry and
inventories, live and from the streams (statuses are not partitioned), and checks that the
servers partition as it was told (mapping.py: `problems()` says what it found). A view of
one node (`node`) follows that node's subjects alone. A view may also hold only the nodes
whose names pass a test (`only`: a glob's, which no subject can express): another node's
telemetry and inventory are let go by their subject, before they are decoded. Either lets
another node's statuses go once decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import zlib
from collections.abc import Callable, Coroutine, Mapping

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from placewatch.schemas import (
    FALLBACK_VERDICTS,
    ComputeStatus,
    FallbackEvent,
    NodeForgotten,
    NodeInventory,
    NodeTelemetry,
    partitions,
    subjects,
)
from placewatch.schemas.printable import printable
from placewatch.schemas.service import endpoint
from placewatch.schemas.streams import for_prefix

from .held import Held, Holdings, content_type
from .impostors import Impostors
from .kept import Kept, Message, node_of, read_kept
from .mapping import PartitionCheck
from .snapshot import FiringFallback, Fleet, FleetState, ShardKey, utc_now
from .unreadable import Unreadable

log = logging.getLogger(__name__)

FILL_TIMEOUT_S = 5.0
ASK_TIMEOUT_S = 2.0
ASK_EVERY_S = 10.0
"""The least time between two asks of one node for its inventory."""
RECONNECT_CHECK_S = 0.5
"""How often the view looks whether its connection came back."""

GONE_FROM_STREAMS = (
    "the bus no longer keeps its telemetry or inventory: forgotten while this view's "
    "connection was away"
)
"""The reason of a NodeForgotten a view tells (on_change) of a node it lets go that way."""


class FleetView(FleetState):
    """The latest NodeTelemetry and NodeInventory per node and ComputeStatus per shard, from
    the bus.

    `nc` is a connected nats-py client the caller owns (and closes); `on_change` is called
    with each message the view took, from the event loop. `partition` of `partitions` (the N
    of the servers' mapping): that partition's nodes only; neither: every node, whether the
    servers partition them or not. `node`: that node only, by its subjects; `only` (not
    with `node`): the nodes whose names it passes, of those."""

    def __init__(
        self,
        nc: Client,
        prefix: str = subjects.DEFAULT_PREFIX,
        *,
        partition: int | None = None,
        partitions: int | None = None,
        node: str | None = None,
        only: Callable[[str], bool] | None = None,
        on_change: Callable[[Message], object] | None = None,
        fill_timeout: float = FILL_TIMEOUT_S,
        follow: bool = True,
    ) -> None:
        super().__init__()
        self.nc = nc
        self.prefix = prefix
        self.stores = for_prefix(prefix)
        self.check = PartitionCheck.of(prefix, partition, partitions)
        """Whether the servers map as the view was told (None: a view of every node)."""
        self.partition = None if self.check is None else self.check.partition
        if node is not None and only is not None:
            raise ValueError("FleetView(node=..., only=...): give one, the node or the test")
        self.node = node
        self.only = node.__eq__ if node is not None else only
        self.on_change = on_change
        self.fill_timeout = fill_timeout
        self.follow = follow
        """Whether start() follows the bus live; without, the view is what the bus keeps
        (one look: `watch --once`), until follow_live(), and holds inventories as they came
        rather than compressed (held.py), for the moment it lives."""
        self.kept: Kept | None = None
        """What the last fill found the bus keeps."""
        self.undecodable = 0
        """Messages that were not what their subject and headers said; ignored."""
        self.impostors = Impostors()  # those of them that named another node than the subject's
        self.unreadable = Unreadable()
        """All of them, by reason (unreadable.py)."""
        if self.check is not None:
            self.check.out_of_place = functools.partial(self.unreadable.found, "partition")
        self._status_seen: dict[ShardKey, float] = {}
        self._subs: list[Subscription] = []
        self._asked: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        """Asks for inventories, and the watch for reconnects, running."""
        self._forgotten: set[str] | None = None
        """The nodes forgotten while a fill reads the streams, whose copies it then ignores;
        None while no fill runs."""
        self._reconnects = 0
        """The connection's reconnects as the last fill began."""

    async def start(self) -> None:
        """Subscribe (where the view follows the bus), then fill from the inventory and
        telemetry streams and the compute bucket."""
        if self.follow:
            await self._subscribe()
        if self.check is not None:
            self._subs += await self.check.subscribe(self.nc)
        self._reconnects = self.nc.stats["reconnects"]
        self.kept = await self._fill()
        if self.follow:
            self._spawn(self._follow_reconnects())

    async def follow_live(self) -> None:
        """Follow the bus from now on, as a view made with `follow` does from its start."""
        if not self.follow:
            self.follow = True
            await self._subscribe()
            self._spawn(self._follow_reconnects())

    async def _subscribe(self) -> None:
        inventory, telemetry = self._followed()
        live = (*inventory, *telemetry, subjects.all_forgotten(self.prefix))
        for subject in (*live, *subjects.all_events(self.prefix)):
            self._subs.append(await self.nc.subscribe(subject, cb=self._live))

    def problems(self) -> list[str]:
        found = [] if self.check is None else list(self.check.problems)
        said = self.unreadable.summary()
        return found if said is None else [*found, said]

    def _followed(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The inventory and telemetry subjects of the view's partition, or of its node."""
        return self._subjects("inventory"), self._subjects("telemetry")

    def _subjects(self, kind: str) -> tuple[str, ...]:
        if self.node is None:
            return (partitions.consumer_subject(kind, self.prefix, self.partition),)
        token = subjects.token(self.node)
        if self.partition is not None:
            return (f"{self.prefix}.{kind}.{self.partition}.{token}",)
        return (f"{self.prefix}.{kind}.{token}", f"{self.prefix}.{kind}.*.{token}")

    async def _fill(self) -> Kept:
        """Take what the streams and the bucket keep; what they keep (None: not read). A node
        forgotten meanwhile keeps nothing they had of it, read before the forget or after."""
        self._forgotten = set()
        try:
            return await read_kept(
                self.nc,
                self.stores,
                self._followed(),
                self._hold,
                time.monotonic() + self.fill_timeout,
            )
        finally:
            self._forgotten = None  # only copies read from the streams need it

    async def _follow_reconnects(self) -> None:
        """Catch up each time the connection came back, until it is closed."""
        while not self.nc.is_closed:
            await asyncio.sleep(RECONNECT_CHECK_S)
            if self.nc.stats["reconnects"] != self._reconnects:
                await self._catch_up()

    async def _catch_up(self) -> None:
        """The connection came back: what was published while it was away never came (core
        subscriptions keep nothing), so the view fills again from the streams and the bucket
        and lets go of what they no longer keep (a node forgotten, a status deleted) and did
        not come live since."""
        self._reconnects = self.nc.stats["reconnects"]
        began = time.time()
        self._let_go(await self._fill(), began)

    def _let_go(self, kept: Kept, began: float) -> None:
        for node in () if kept.nodes is None else {*self.nodes, *self.inventories} - kept.nodes:
            if max(h.seen for h in (self.nodes.get(node), self.inventories.get(node)) if h) < began:
                self._forget(node)
                self._told(NodeForgotten(node=node, time=utc_now(), reason=GONE_FROM_STREAMS))
        for key in () if kept.statuses is None else set(self.shards) - kept.statuses:
            if self._status_seen[key] < began:
                self._drop_status(key)

    async def stop(self) -> None:
        """Stop following the bus; the view keeps what it knew."""
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(nats.errors.Error):  # closed already: nothing to undo
                await sub.unsubscribe()
        for task in list(self._tasks):
            task.cancel()

    async def _live(self, msg: Msg) -> None:
        kind = msg.subject[len(self.prefix) + 1 :].split(".", 1)[0]
        type_ = _KINDS.get(kind)
        if type_ is None:
            self.undecodable += 1
            return
        self._hold(msg.data, msg.headers, type_, msg.subject)

    def _hold(
        self,
        data: bytes,
        headers: Mapping[str, str] | None,
        type_: type[Message],
        subject: str,
        stored: float | None = None,
    ) -> Message | None:
        """Take a message that came on `subject` live (`stored` None) or, stored by the
        server at `stored` (seconds since the epoch), read from a stream or bucket; the
        message, or None where it was not one, names another node, its node is forgotten or
        not one the view holds (`only`)."""
        if self.only is not None and not self._wanted(type_, subject):
            return None
        message = self.unreadable.read(data, type_, headers, subject, self.impostors)
        if message is None:
            self.undecodable += 1
            return None
        if self.only is not None and type_ is not NodeForgotten and not self.only(node_of(message)):
            return None
        seen = time.time() if stored is None else stored
        if isinstance(message, NodeForgotten):
            taken = self._forget(message.node)
        elif self._forgotten and stored is not None and node_of(message) in self._forgotten:
            return None  # read from a stream as the node was forgotten: what it kept is gone
        elif isinstance(message, NodeTelemetry):
            taken = self._telemetry(message, data, headers, seen, stored)
        elif isinstance(message, NodeInventory):
            taken = self._inventory(message, data, headers, seen, stored)
        elif isinstance(message, FallbackEvent):
            taken = self._status(message.status, seen, stored)
        else:
            taken = self._status(message, seen, stored)
        if taken:
            self._told(message)
        return message

    def _told(self, message: Message) -> None:
        if self.on_change is not None:
            try:
                self.on_change(message)
            except Exception:
                log.exception("on_change failed for a %s", type(message).__name__)

    def _wanted(self, type_: type[Message], subject: str) -> bool:
        """Whether `only` passes the node a telemetry or inventory subject names (its last
        token); True for other kinds, and for a token no name gives (read, and refused as
        what it is)."""
        if self.only is None or (type_ is not NodeTelemetry and type_ is not NodeInventory):
            return True
        try:
            return self.only(subjects.name(subject.rpartition(".")[2]))
        except ValueError:
            return True

    def _telemetry(
        self,
        t: NodeTelemetry,
        data: bytes,
        headers: Mapping[str, str] | None,
        seen: float,
        stored: float | None,
    ) -> bool:
        held = self.nodes.get(t.node)
        if held is not None:
            if t.session == held.session:
                if t.seq <= held.seq:
                    return False  # the stream's copy of a sample already seen live
            elif not _newer(stored, held.seen):
                return False
        elif self.check is not None and not self.check.taken(t.node, stored):
            return False  # new to the view, and in a partition the mapping does not give it
        self.nodes[t.node] = Held(
            t.time,
            t.inventory,
            data,
            content_type(headers),
            seen=seen,
            session=t.session,
            seq=t.seq,
        )
        inventory = self.inventories.get(t.node)
        if inventory is None or inventory.inventory != t.inventory:
            self._ask_inventory(t.node)
        return True

    def _inventory(
        self,
        i: NodeInventory,
        data: bytes,
        headers: Mapping[str, str] | None,
        seen: float,
        stored: float | None,
    ) -> bool:
        held = self.inventories.get(i.node)
        if held is not None and not _newer(stored, held.seen):
            return False
        if held is None and self.check is not None and not self.check.taken(i.node, stored):
            return False
        self.inventories[i.node] = Held(  # compressed where held for long (followed)
            i.time,
            i.id,
            zlib.compress(data) if self.follow else data,
            content_type(headers),
            compressed=self.follow,
            seen=seen,
        )
        return True

    def _forget(self, node: str) -> bool:
        """Let a node go; whether the view held anything of it."""
        if self._forgotten is not None:
            self._forgotten.add(node)
        self._asked.pop(node, None)
        held = [self.nodes.pop(node, None), self.inventories.pop(node, None)]
        keys = [key for key in self.shards if key[0] == node]
        for key in keys:
            self._drop_status(key)
        return bool(keys) or any(h is not None for h in held)

    def _drop_status(self, key: ShardKey) -> None:
        del self.shards[key], self._status_seen[key]
        self._since.pop(key, None)

    def _ask_inventory(self, node: str) -> None:
        """Ask the node for the inventory its telemetry names, unless asked lately: the
        inventory it published may come any moment (or came before the view started and
        its stream is gone)."""
        now = time.monotonic()
        if now - self._asked.get(node, -ASK_EVERY_S) < ASK_EVERY_S or not self._subs:
            return
        self._asked[node] = now
        self._spawn(self._ask(node))

    def _spawn(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, node: str) -> None:
        try:
            reply = await self.nc.request(
                endpoint(node, "inventory", self.prefix), b"", timeout=ASK_TIMEOUT_S
            )
        except (nats.errors.Error, TimeoutError) as exc:
            log.debug("no inventory from %s's service: %s", printable(node), exc)
            return
        answered = subjects.inventory(node, self.prefix)  # what the reply stands for
        self._hold(reply.data, reply.headers, NodeInventory, answered)

    def _status(self, s: ComputeStatus, seen: float, stored: float | None) -> bool:
        key = (s.node, s.shard)
        held = self.shards.get(key)
        if held is not None and not _newer(stored, self._status_seen[key]):
            return False
        if held == s:
            return False  # a FallbackEvent carries the status just taken
        self.shards[key] = s
        self._status_seen[key] = seen
        if s.verdict not in FALLBACK_VERDICTS:
            self._since.pop(key, None)
        elif key not in self._since:
            self._since[key] = s.time
        return True


_KINDS: dict[str, type[Message]] = {
    "telemetry": NodeTelemetry,
    "inventory": NodeInventory,
    "compute": ComputeStatus,
    "fallback": FallbackEvent,
    "forgotten": NodeForgotten,
}


def _newer(stored: float | None, held_seen: float) -> bool:
    """Whether a message replaces one the view took at `held_seen`: one that came live always
    does (a node's messages arrive in the order it sent them); a copy from a stream or bucket
    only if the server stored it after that. Neither asks the node's clock."""
    return stored is None or stored > held_seen


__all__ = [
    "FALLBACK_VERDICTS",
    "FiringFallback",
    "Fleet",
    "FleetView",
    "Held",
    "Holdings",
    "Message",
    "ShardKey",
]
