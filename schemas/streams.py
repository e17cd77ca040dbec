"""The JetStream streams and KV buckets of the contract: one table, read by everything.

The worker creates them from this table (unless told not to), `placewatch
doctor` checks them against it and prints the command an operator runs to
make each by hand, and the documentation describes them from it. Plain data:
a reader needs no NATS client to know what a stream holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import subjects

DUPLICATE_WINDOW_S = 300.0
"""How long the events stream remembers a Nats-Msg-Id: a retried publish inside it is stored
once."""


@dataclass(frozen=True)
class Stream:
    """A stream: its name, what it takes, how much of it it keeps."""

    name: str
    kind: str
    """"events", "telemetry" or "inventory": which subjects of a prefix it takes."""
    purpose: str
    duplicate_window_s: float | None = None
    max_msgs_per_subject: int | None = None

    def subjects(self, prefix: str = subjects.DEFAULT_PREFIX) -> list[str]:
        if self.kind == "events":
            return subjects.all_events(prefix)
        if self.kind == "inventory":
            return [subjects.all_inventory(prefix)]
        return [subjects.all_telemetry(prefix)]

    def command(self, prefix: str, storage: str, replicas: int) -> str:
        """The NATS CLI command that creates it as the worker would."""
        limits = ""
        if self.duplicate_window_s is not None:
            limits += f" --dupe-window {self.duplicate_window_s / 60:g}m"
        if self.max_msgs_per_subject is not None:
            limits += f" --max-msgs-per-subject {self.max_msgs_per_subject}"
        return (
            f"nats stream add {self.name} --subjects '{','.join(self.subjects(prefix))}' "
            f"--storage {storage} --replicas {replicas}{limits} --defaults"
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
        if self.rollup:
            return add
        return f"{add} && nats stream edit {self.stream} --no-allow-rollup -f"


EVENTS = Stream(
    subjects.STREAM_EVENTS,
    "events",
    "compute statuses and fallback events, each stored once",
    duplicate_window_s=DUPLICATE_WINDOW_S,
)
TELEMETRY = Stream(
    subjects.STREAM_TELEMETRY,
    "telemetry",
    "the latest sample of each node",
    max_msgs_per_subject=1,
)
INVENTORY = Stream(
    subjects.STREAM_INVENTORY,
    "inventory",
    "the latest inventory of each node (its GPUs, host and GPU processes)",
    max_msgs_per_subject=1,
)
PLACEMENTS = Bucket(subjects.BUCKET_PLACEMENTS, "placements, written by a control plane")
COMPUTE = Bucket(subjects.BUCKET_COMPUTE, "the latest compute status of each shard", rollup=False)
LEASES = Bucket(
    subjects.BUCKET_LEASES, "one live worker per node name: who holds each node", rollup=False
)

STREAMS = (EVENTS, TELEMETRY, INVENTORY)
BUCKETS = (PLACEMENTS, COMPUTE, LEASES)
