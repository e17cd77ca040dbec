"""The JetStream streams and KV buckets of the contract: one table, read by everything.

The worker creates them from this table (unless told not to), `placewatch
doctor` checks them against it and prints the command an operator runs to
make each by hand, and the documentation describes them from it. Plain data:
a reader needs no NATS client to know what a stream holds.

Their names follow the subject prefix, so that two prefixes share a cluster
without sharing a stream or a bucket. A prefix is one or more tokens joined
by dots, each of lowercase letters `a-z`, digits and `-`; its stem is the
prefix with each dot written `_` (`acme.pw` -> `acme_pw`). A name is a
function of the prefix and the kind alone: a stream is `<STEM>_<KIND>`
(`stream_name`: `PLACEWATCH_EVENTS`, `ACME_PW_TELEMETRY`), a bucket
`<stem>_<kind>` (`bucket_name`: `acme_pw_leases`), so the default prefix
`placewatch` keeps the names it always had. Neither `_` nor a capital can be
in a prefix, nor `_` in a kind, so a name gives its prefix and its kind back:
two prefixes never share a name. A prefix outside the rule has no names and
is refused. `STREAM_KINDS` and `BUCKET_KINDS` list the kinds: a new one is
one line there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import partitions, subjects

DUPLICATE_WINDOW_S = 300.0
"""How long the events stream remembers a Nats-Msg-Id: a retried publish inside it is stored
once."""

MAX_CONSUMERS = 1_000_000
"""The consumers each stream and bucket may have, set when it is made. nats-server 2.15 gives a
stream that sets no limit its `default_max_consumers`, 1,000 unless the server says otherwise:
every worker holds a consumer on the placements bucket for as long as it runs, and FleetViews,
workers that start and `placewatch forget` make short-lived ones on the others, so a fleet of
more than a thousand nodes would be refused from the 1,001st on."""
DEFAULT_CONSUMER_LIMIT_SINCE = (2, 15)
"""The first nats-server that limits a stream's consumers when the stream sets no limit."""
TOO_MANY_CONSUMERS = 10026
"""JetStream's error code for a consumer refused by its stream's limit."""


def raise_consumer_limit(stream: str) -> str:
    """The NATS CLI command that gives a stream made without a consumer limit placewatch's."""
    return f"nats stream edit {stream} --max-consumers {MAX_CONSUMERS} -f"


def consumers_refused(exc: BaseException, stream: str) -> str | None:
    """What to do when `exc` is the server refusing a consumer on `stream` because the stream
    has as many as its limit allows; None for any other error."""
    if getattr(exc, "err_code", None) != TOO_MANY_CONSUMERS:
        return None
    return (
        f"stream {stream} has as many consumers as its limit allows (nats-server 2.15 gives a "
        "stream made without a limit 1,000, and every worker holds one on the placements "
        f"bucket): raise it with `{raise_consumer_limit(stream)}`"
    )


MAX_PREFIX_CHARS = 64
"""The longest prefix: its names stay short as a stream's folder on a server's disk."""
PREFIX_RULE = "one or more tokens joined by dots, each of lowercase letters a-z, digits and '-'"
_PREFIX = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*")
_KIND = re.compile(r"[a-z]+")


def stem(prefix: str) -> str:
    """What every stream and bucket name of `prefix` starts with (`acme.pw` -> `acme_pw`).

    Raises ValueError, naming the prefix and what to give, for one the rule cannot map."""
    if len(prefix) > MAX_PREFIX_CHARS or not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"subject prefix {prefix!r} cannot name streams and buckets: give a prefix of at "
            f"most {MAX_PREFIX_CHARS} characters, {PREFIX_RULE} (such as 'placewatch' or "
            "'acme.pw'); docs/subjects.md, Streams and buckets"
        )
    return prefix.replace(".", "_")


def stream_name(prefix: str, kind: str) -> str:
    """The stream of `kind` under `prefix`: `<STEM>_<KIND>` (`acme.pw`, `events` ->
    `ACME_PW_EVENTS`)."""
    return f"{stem(prefix)}_{_kind(kind)}".upper()


def bucket_name(prefix: str, kind: str) -> str:
    """The KV bucket of `kind` under `prefix`: `<stem>_<kind>` (`acme.pw`, `leases` ->
    `acme_pw_leases`)."""
    return f"{stem(prefix)}_{_kind(kind)}"


def _kind(kind: str) -> str:
    """A kind is lowercase letters only: with no `_` in it, a name splits back into its stem
    and its kind at the last `_`."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"kind {kind!r}: give lowercase letters a-z only")
    return kind


@dataclass(frozen=True)
class Stream:
    """A stream: its name, what it takes, how much of it it keeps."""

    name: str
    subjects: tuple[str, ...]
    purpose: str
    duplicate_window_s: float | None = None
    max_msgs_per_subject: int | None = None

    def command(self, storage: str, replicas: int) -> str:
        """The NATS CLI command that creates it as the worker would."""
        limits = ""
        if self.duplicate_window_s is not None:
            limits += f" --dupe-window {self.duplicate_window_s / 60:g}m"
        if self.max_msgs_per_subject is not None:
            limits += f" --max-msgs-per-subject {self.max_msgs_per_subject}"
        return (
            f"nats stream add {self.name} --subjects '{','.join(self.subjects)}' "
            f"--storage {storage} --replicas {replicas}{limits} --max-consumers {MAX_CONSUMERS} "
            "--defaults"
        )


@dataclass(frozen=True)
class Bucket:
    """A KV bucket: its name, how many values of a key it keeps, and whether a message may
    roll up (replace) the others."""

    name: str
    purpose: str
    history: int = 1
    rollup: bool = True
    """False where every node writes its own keys: a bucket takes a `Nats-Rollup: all` header
    on any message a writer may publish, and one node's put with it on its own key would
    wipe every other node's keys (nats-server 2.15; permissions see subjects, not headers).
    A put, an update and a delete need no rollup; only a purge does."""

    @property
    def stream(self) -> str:
        return subjects.kv_stream(self.name)

    def command(self, storage: str, replicas: int) -> str:
        """The NATS CLI commands that create it as the worker would."""
        add = (
            f"nats kv add {self.name} --history {self.history} --storage {storage} "
            f"--replicas {replicas}"
        )
        rollup = "" if self.rollup else " --no-allow-rollup"
        return f"{add} && nats stream edit {self.stream} --max-consumers {MAX_CONSUMERS}{rollup} -f"


@dataclass(frozen=True)
class StreamKind:
    """A kind of stream every prefix has: the last part of its name, and how it is made."""

    kind: str
    purpose: str
    subjects: Callable[[str], tuple[str, ...]]
    """What it takes under a prefix."""
    duplicate_window_s: float | None = None
    max_msgs_per_subject: int | None = None

    def at(self, prefix: str) -> Stream:
        return Stream(
            stream_name(prefix, self.kind),
            self.subjects(prefix),
            self.purpose,
            self.duplicate_window_s,
            self.max_msgs_per_subject,
        )


def per_node(kind: str, purpose: str) -> StreamKind:
    """A stream of the last message of each node on `<prefix>.<kind>.<node>`, taking the
    partitioned form as well where `partitions.PARTITIONED` names the kind."""
    return StreamKind(
        kind,
        purpose,
        functools.partial(partitions.stream_subjects, kind),
        max_msgs_per_subject=1,
    )


@dataclass(frozen=True)
class BucketKind:
    """A kind of KV bucket every prefix has: the last part of its name, and how it is made."""

    kind: str
    purpose: str
    rollup: bool = True

    def at(self, prefix: str) -> Bucket:
        return Bucket(bucket_name(prefix, self.kind), self.purpose, rollup=self.rollup)


STREAM_KINDS: tuple[StreamKind, ...] = (
    StreamKind(
        "events",
        "compute statuses and fallback events, each stored once",
        lambda prefix: tuple(subjects.all_events(prefix)),
        duplicate_window_s=DUPLICATE_WINDOW_S,
    ),
    per_node("telemetry", "the latest sample of each node, as published and as partitioned"),
    per_node(
        "inventory",
        "the latest inventory of each node (its GPUs, host and GPU processes), as published "
        "and as partitioned",
    ),
)
"""Every prefix's streams, in the order they are made and described. A new kind is one line
more: its name follows from (prefix, kind)."""

BUCKET_KINDS: tuple[BucketKind, ...] = (
    BucketKind("placements", "placements, written by a control plane"),
    BucketKind("compute", "the latest compute status of each shard", rollup=False),
    BucketKind("leases", "one live worker per node name: who holds each node", rollup=False),
)
"""Every prefix's KV buckets, likewise."""


@dataclass(frozen=True)
class StreamsAndBuckets:
    """The streams and buckets of one prefix, by kind."""

    prefix: str
    streams_by_kind: Mapping[str, Stream]
    buckets_by_kind: Mapping[str, Bucket]

    @property
    def streams(self) -> tuple[Stream, ...]:
        return tuple(self.streams_by_kind.values())

    @property
    def buckets(self) -> tuple[Bucket, ...]:
        return tuple(self.buckets_by_kind.values())

    @property
    def events(self) -> Stream:
        return self.streams_by_kind["events"]

    @property
    def telemetry(self) -> Stream:
        return self.streams_by_kind["telemetry"]

    @property
    def inventory(self) -> Stream:
        return self.streams_by_kind["inventory"]

    @property
    def placements(self) -> Bucket:
        return self.buckets_by_kind["placements"]

    @property
    def compute(self) -> Bucket:
        return self.buckets_by_kind["compute"]

    @property
    def leases(self) -> Bucket:
        return self.buckets_by_kind["leases"]


@functools.cache
def for_prefix(prefix: str = subjects.DEFAULT_PREFIX) -> StreamsAndBuckets:
    """The streams and buckets of `prefix`, named by the rule above (ValueError for a prefix
    it cannot map)."""
    stem(prefix)
    return StreamsAndBuckets(
        prefix,
        {k.kind: k.at(prefix) for k in STREAM_KINDS},
        {k.kind: k.at(prefix) for k in BUCKET_KINDS},
    )


_DEFAULT = for_prefix()
# The default prefix's, for readers that use it; anything given a prefix asks for_prefix().
EVENTS = _DEFAULT.events
TELEMETRY = _DEFAULT.telemetry
INVENTORY = _DEFAULT.inventory
PLACEMENTS = _DEFAULT.placements
COMPUTE = _DEFAULT.compute
LEASES = _DEFAULT.leases
STREAMS = _DEFAULT.streams
BUCKETS = _DEFAULT.buckets
