"""`placewatch forget NODE` (or `--silent-for DURATION`): the bus lets go of a node that is
gone for good.

A node whose worker stopped for ever (decommissioned, renamed, its disk dead) leaves what
the bus keeps of it: its shards' last statuses in the compute bucket, its last telemetry
and inventory in their streams. `placewatch alerts` takes the bucket for what is true now,
so a fallback the node left firing is posted to Alertmanager for as long as it runs, and
again after every restart; a FleetView that starts later holds the node, stale, for ever.

forget says for the node what its worker says of a shard it no longer watches: each
shard `gone`, each fallback left firing resolved, stored once in the events stream as a
worker's events are, so that every consumer hears it live or when it catches up. Then it
removes the node's keys from the compute bucket and its last telemetry and inventory
from their streams, and tells the views that run (a NodeForgotten): a FleetView lets the
node go. The history in the events stream stays.

It never speaks over a live worker. It takes the node's lease, as a worker does before it
publishes: a lease that is live refuses it (exit 2, nothing changed), and a worker that
starts meanwhile is refused until forget gives the lease back. What it cannot read, it
does not remove: a key whose value is not a ComputeStatus is named and left. The node's
placements are its control plane's, and are only counted.

`--silent-for` finds the nodes for a fleet whose node names come and go: each node of which
the bus keeps anything (telemetry, inventory, statuses) whose newest was stored by the server
longer ago than that, by the server's clock, is forgotten in turn as above.
"""

from __future__ import annotations

import argparse
import logging
import math
import socket
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from placewatch.arguments import seconds
from placewatch.connection import Unreachable, connect_within
from placewatch.lifecycle import drain
from placewatch.retained import (
    Incomplete,
    compute_statuses,
    each_last_per_subject,
    stored_at,
)
from placewatch.schemas import (
    FALLBACK_VERDICTS,
    DecodeError,
    NodeForgotten,
    decode,
    encode,
    subjects,
)
from placewatch.schemas.partitions import PARTITIONED, consumer_subject, node_subjects
from placewatch.schemas.streams import for_prefix

from .bus.clock import clock_offset
from .bus.events import EventTracker
from .bus.holder import Holder
from .bus.lease import LeaseHeld, LeaseKeeper, failure, node_lease
from .bus.options import connect_options
from .bus.outbox import EventOutbox, NodeStatuses, node_statuses, node_values
from .bus.streams import StreamSettings
from .config import Settings
from .doctor.report import count
from .pipeline import new_session

log = logging.getLogger(__name__)

EXIT_FORGOTTEN, EXIT_FAILED, EXIT_LIVE = 0, 1, 2
EXIT_USAGE = 2
LEASE_INTERVAL_S = 10.0
"""The interval the lease forget takes says: should forget die holding it, a worker with the
node's name may start 30 s later (three intervals)."""
TIMEOUT_S = 5.0


def add_arguments(forget: argparse.ArgumentParser) -> None:
    forget.add_argument(
        "node",
        metavar="NODE",
        nargs="?",
        help="the node's name, as its worker published it (its --node)",
    )
    forget.add_argument(
        "--silent-for",
        type=duration,
        metavar="DURATION",
        help="instead of NODE: every node of which the bus has kept nothing newer than this "
        "(90s, 30m, 12h, 7d), each as NODE would be",
    )
    forget.add_argument(
        "--dry-run", action="store_true", help="say what would be done, and change nothing"
    )
    forget.add_argument(
        "--timeout",
        type=seconds,
        default=TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for connecting and for each answer of the server ({TIMEOUT_S:g})",
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """Seconds from `90`, `90s`, `30m`, `12h` or `7d`; argparse's error otherwise."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 366 * 86400:  # NaN and inf too
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give a number of seconds, or one ending in s, m, h or "
            "d (90s, 30m, 12h, 7d), up to a year"
        )
    return seconds


def command(settings: Settings, args: argparse.Namespace) -> int:
    if (args.node is None) == (args.silent_for is None):
        print(
            "placewatch: forget: give one NODE, or --silent-for DURATION for every node the "
            "bus has heard nothing of for that long",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.log_level is None:  # a command that says what it did: only warnings besides
        logging.getLogger().setLevel(logging.WARNING)
    what = settings.node if args.silent_for is None else "--silent-for"
    try:
        code: int = anyio.run(
            forget,
            settings,
            Asked(args.dry_run, args.timeout, args.silent_for),
            sys.stdout,
            backend="asyncio",
        )
    except Unreachable as exc:
        print(f"placewatch: forget {what}: {exc}; nothing changed", file=sys.stderr)
        return EXIT_FAILED
    return code


@dataclass(frozen=True)
class Asked:
    """What the command line asks of forget besides the settings."""

    dry_run: bool = False
    timeout_s: float = TIMEOUT_S
    silent_for_s: float | None = None
    """Forget every node silent this long, instead of `settings.node`."""


async def forget(settings: Settings, asked: Asked, out: TextIO) -> int:
    """Forget `settings.node` on the bus, or every node silent for `asked.silent_for_s` (or,
    `asked.dry_run`, say what that would do); the exit code, the worst of the nodes'. Raises
    Unreachable when no server answers within `asked.timeout_s`."""
    nc = await connect_within(
        settings.nats or [subjects.LOCAL_URL],
        f"placewatch forget {settings.node}",
        # The node's inbox, as its worker has: the node's own credentials may do what they allow.
        connect_options(settings) | {"inbox_prefix": subjects.inbox(settings.node)},
        asked.timeout_s,
    )
    try:
        if asked.silent_for_s is None:
            return await Forget(nc, settings, settings.node, asked, out).run()
        nodes = await _silent(nc, settings.prefix, asked, out)
        if nodes is None:
            return EXIT_FAILED
        codes = [await Forget(nc, settings, node, asked, out).run() for node in nodes]
        return max(codes, default=EXIT_FORGOTTEN)
    finally:
        await drain(nc)


async def _silent(nc: Client, prefix: str, asked: Asked, out: TextIO) -> list[str] | None:
    """The nodes silent for `asked.silent_for_s`, said; None (and why, said) when the bus
    could not be read to its end."""
    assert asked.silent_for_s is not None
    try:
        with anyio.fail_after(asked.timeout_s * 4):
            newest = await newest_stored(nc, prefix, asked.timeout_s * 3)
            offset = await clock_offset(nc, for_prefix(prefix).telemetry.name) or 0.0
    except (Incomplete, nats.errors.Error, TimeoutError) as exc:
        print(
            f"placewatch: forget --silent-for: the bus could not be read to its end "
            f"({failure(exc)}); nothing changed",
            file=sys.stderr,
        )
        return None
    since = time.time() + offset - asked.silent_for_s
    nodes = sorted(node for node, stored in newest.items() if stored < since)
    said = ", ".join(nodes) if nodes else "none"
    print(
        f"{len(nodes)} of {len(newest)} nodes silent for more than "
        f"{asked.silent_for_s:g} s: {said}",
        file=out,
        flush=True,
    )
    return nodes


class _Named(msgspec.Struct):
    node: str


async def newest_stored(nc: Client, prefix: str, within: float) -> dict[str, float]:
    """Each node the bus keeps anything of (its telemetry, inventory, shards' statuses),
    with when the server stored the newest of it (seconds since the epoch, its clock)."""
    stores = for_prefix(prefix)
    newest: dict[str, float] = {}

    def seen(node: str, stored: float) -> None:
        newest[node] = max(stored, newest.get(node, 0.0))

    def take(batch: list[Msg]) -> None:
        for msg in batch:
            try:
                node = decode(msg.data, _Named, msg.headers or {}).node
            except DecodeError:
                continue  # not a node's message: nobody's to forget
            if subjects.carries(msg.subject, node):  # else one node speaking for another
                seen(node, stored_at(msg))

    for kind in PARTITIONED:  # a batch at a time: a fleet's last messages are hundreds of MB
        stream = stores.streams_by_kind[kind].name
        subject = consumer_subject(kind, prefix)
        await each_last_per_subject(nc, stream, subject, within, take, complete=True)
    for status, stored in await compute_statuses(nc, prefix, within):
        seen(status.node, stored)
    return newest


@dataclass
class Forget:
    nc: Client
    settings: Settings
    node: str
    asked: Asked
    out: TextIO

    def __post_init__(self) -> None:
        self.timeout_s = self.asked.timeout_s
        self.prefix = self.settings.prefix
        self.stores = for_prefix(self.prefix)
        self.js = self.nc.jetstream(timeout=self.timeout_s)
        session = new_session()
        self.keeper = LeaseKeeper(
            node_lease(self.node, session, LEASE_INTERVAL_S),
            StreamSettings(),  # the leases bucket made, as a worker makes it, where missing
            prefix=self.prefix,
        )
        self.tracker = EventTracker(self.node, session, self.prefix)

    async def run(self) -> int:
        dry_run = self.asked.dry_run
        try:
            with anyio.fail_after(self.timeout_s * 4):
                holder = await self.keeper.holder(self.nc, self.js)
                now = self.keeper.server_now()
                if holder is not None and holder.live(now, LEASE_INTERVAL_S):
                    return self._fail(refused(self.node, holder, now), EXIT_LIVE)
                left = await self._read()  # and a prefix that holds nothing stops here
                if dry_run:
                    return await self._tell(left, dry_run=True)
                await self.keeper.take_once(self.nc, self.js)
            try:
                return await self._forget()
            finally:
                await self.keeper.release()
        except LeaseHeld:  # a worker started between the read and the take
            return self._fail(
                f"a worker took node {self.node}'s lease as forget was about to: it is live",
                EXIT_LIVE,
            )
        except nats.js.errors.NotFoundError as exc:
            return self._fail(
                f"this server keeps nothing under prefix {self.prefix} ({failure(exc)}): check "
                "--prefix (PLACEWATCH_PREFIX); nothing was changed"
            )
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            return self._fail("the server has no JetStream, so it keeps nothing of any node")
        except (nats.errors.Error, TimeoutError) as exc:
            return self._fail(f"the server did not do what was asked ({failure(exc)})")

    async def _forget(self) -> int:
        left = await self._read()
        changes = self.tracker.forget(list(left.statuses.values()), self._reason())
        code = await self._tell(left, dry_run=False)
        events = self.stores.events.name
        with anyio.fail_after(self.timeout_s * 4):
            outbox = EventOutbox(
                self.nc, self.prefix, self.settings.encoding, streams=StreamSettings(create=False)
            )
            await outbox.setup()
            outbox.add(changes)
            await outbox.flush()
        if outbox.pending:
            return self._fail(
                f"{len(outbox.pending)} of {len(changes)} messages were not stored in stream "
                f"{events}, so nothing was removed; run forget again (what was stored is "
                "stored once)"
            )
        sent = f"{count(len(changes), 'message')} stored in stream {events}"
        try:
            with anyio.fail_after(self.timeout_s * 4):
                removed = await self._remove(list(left.statuses))
        except (nats.errors.Error, TimeoutError) as exc:
            return self._fail(
                f"{sent}, so every consumer hears its shards gone; but what the bus keeps of "
                f"the node was not removed ({failure(exc)}): forget's credentials must be "
                "allowed to purge the streams (docs/operations.md, A node gone for good); run "
                "it again with such credentials"
            )
        try:
            told = await self._tell_views()
        except (nats.errors.Error, TimeoutError) as exc:
            return self._fail(
                f"{sent}; {removed}; but the views were not told ({failure(exc)}): a FleetView "
                "that runs holds the node, stale, until it restarts"
            )
        print(
            f"forgot node {self.node}: {sent}; {removed}; {told}; its lease given back",
            file=self.out,
            flush=True,
        )
        return code

    async def _tell_views(self) -> str:
        """Say the node forgotten to the views that run (a FleetView lets it go); what was
        done."""
        subject = subjects.forgotten(self.node, self.prefix)
        said = NodeForgotten(node=self.node, time=datetime.now(UTC), reason=self._reason())
        payload, headers = encode(said, self.settings.encoding)
        await self.nc.publish(subject, payload, headers=headers)
        await self.nc.flush(max(math.ceil(self.timeout_s), 1))  # nats-py takes whole seconds
        return f"the views told on {subject}"

    async def _remove(self, keys: list[str]) -> str:
        """Remove the node's `keys` from the compute bucket, and its last telemetry and
        inventory (as published and as partitioned) from their streams; what was done."""
        compute = self.stores.compute
        for key in keys:
            subject = subjects.kv_subject(compute.name, key)
            await self.js.purge_stream(compute.stream, subject=subject)
        done = [f"{count(len(keys), 'key')} removed from KV {compute.name}"]
        for kind in PARTITIONED:
            stream = self.stores.streams_by_kind[kind].name
            try:
                for subject in node_subjects(kind, self.node, self.prefix):
                    await self.js.purge_stream(stream, subject=subject)
            except nats.js.errors.NotFoundError:
                done.append(f"no stream {stream}")
            else:
                done.append(f"its {kind} removed from stream {stream}")
        return "; ".join(done[:1]) + "; " + " and ".join(done[1:])

    async def _read(self) -> NodeStatuses:
        """What the compute bucket holds of the node: all of it, or raise."""
        left = await node_statuses(self.nc, self.stores.compute.name, self.node)
        if left.stopped:
            raise nats.errors.Error(
                f"the node's keys in KV {self.stores.compute.name} were not all read: "
                f"{left.stopped}; nothing was changed"
            )
        return left

    async def _tell(self, left: NodeStatuses, *, dry_run: bool) -> int:
        """Say, shard by shard, what forget does (or would); EXIT_FAILED when something of
        the node is left that it cannot remove."""
        will = "would say" if dry_run else "says"
        for status in left.statuses.values():
            if status.verdict == "gone":
                told = "already gone"
            elif status.verdict in FALLBACK_VERDICTS:
                told = f"{status.verdict}: {will} gone, and its fallback resolved"
            else:
                told = f"{status.verdict}: {will} gone"
            print(f"  {self.node} {status.shard}: {told}", file=self.out)
        for key in left.unreadable:
            print(
                f"  {self.node}: key {key!r} in KV {self.stores.compute.name} holds no "
                "ComputeStatus this version can read: left as it is (delete it with "
                f"`nats kv del {self.stores.compute.name} {key}` if nothing needs it)",
                file=self.out,
            )
        placed = await self._placements()
        if placed:
            them = "it" if placed == 1 else "them"
            print(
                f"  {self.node}: {count(placed, 'placement')} in KV "
                f"{self.stores.placements.name}, left to the control plane that wrote {them}; "
                f"a worker started under this name acts on {them}",
                file=self.out,
            )
        if dry_run:
            print(
                f"node {self.node}: {count(len(left.statuses), 'shard status', 'es')}, and its "
                "telemetry and inventory, would be removed from the bus (--dry-run: nothing "
                "changed)",
                file=self.out,
            )
        self.out.flush()
        return EXIT_FAILED if left.unreadable else EXIT_FORGOTTEN

    async def _placements(self) -> int:
        """How many placements the node has; 0 where they cannot be read."""
        try:
            found, _ = await node_values(self.nc, self.stores.placements.name, self.node)
        except (nats.errors.Error, TimeoutError):
            return 0
        return sum(value is not None for value in found.values())

    def _reason(self) -> str:
        return (
            f"forgotten: `placewatch forget` on {socket.gethostname()} said node {self.node} "
            "is gone for good"
        )

    def _fail(self, why: str, code: int = EXIT_FAILED) -> int:
        print(f"placewatch: forget {self.node}: {why}", file=sys.stderr, flush=True)
        return code


def refused(node: str, holder: Holder, now: datetime) -> str:
    """Why forget leaves a node whose lease is live alone, and what to do."""
    age = max((now - holder.stored).total_seconds(), 0.0)
    left = max((holder.expires(LEASE_INTERVAL_S) - now).total_seconds(), 0.0)
    return (
        f"node {node} has a live worker ({holder.who()}; its lease was written {age:.1f} s "
        f"ago and expires in {left:.1f} s): forget is for a node whose worker is gone. Stop "
        "that worker (it then gives its lease back), or wait for its lease to expire, and "
        "run forget again; nothing was changed"
    )
