"""Partitions: the servers spread each node's per-node messages over N partitions, by node.

A consumer that cannot keep up with a whole fleet takes one partition of it. The partitions
are NATS's own: a deterministic subject mapping in the servers' configuration (nats-server
2.8 and later) rewrites `<prefix>.<kind>.<node>`, as a server receives it, to
`<prefix>.<kind>.<p>.<node>`, where p is the 32-bit FNV-1a hash of the node's token modulo
N (`{{partition(N,1)}}`). Workers publish as they always do; subscribers and streams see
only the mapped subject, so whatever takes these kinds takes both forms: a server without
the mapping delivers the first, one with it the second.

Permissions are checked on the mapped subject (nats-server 2.15: a user allowed
`placewatch.telemetry.gpu-07` alone is refused `placewatch.telemetry.1.gpu-07`), so a
node's credentials allow both forms (docs/operations.md, Partitions).
"""

from __future__ import annotations

from . import subjects

PARTITIONED = subjects.PARTITIONED
"""The kinds a node publishes on `<prefix>.<kind>.<node>`, one subject per node, that the
mapping spreads over the same partitions (subjects.PARTITIONED)."""

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def check(partition: int, partitions: int) -> None:
    """ValueError unless `partition` is one of `partitions` (0 to N-1, as the server numbers
    them)."""
    if partitions < 1:
        raise ValueError(
            f"{partitions} partitions: give the N of the servers' partition mapping, 1 or more "
            "(docs/operations.md, Partitions)"
        )
    if not 0 <= partition < partitions:
        which = (
            f"is not one of {partitions} partitions: give 0 to {partitions - 1}"
            if partitions > 1
            else "is out of range for 1 partition: give 0"
        )
        raise ValueError(
            f"partition {partition} {which}, as the servers' mapping numbers them "
            "(docs/operations.md, Partitions)"
        )


def partition_of(node: str, partitions: int) -> int:
    """The partition the servers' mapping puts `node` in: FNV-1a (32 bits) of its subject
    token, modulo `partitions`, as nats-server computes `{{partition(N,1)}}` of one token."""
    check(0, partitions)
    return node_hash(node) % partitions


def node_hash(node: str) -> int:
    """The FNV-1a (32 bits) of the node's subject token, which every N's mapping takes modulo
    N: one hash tells the node's partition for any N."""
    h = _FNV_OFFSET
    for byte in subjects.token(node).encode():
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def mapped(kind: str, node: str, partitions: int, prefix: str = subjects.DEFAULT_PREFIX) -> str:
    """The subject a node's message of `kind` reaches subscribers on once the mapping is on."""
    return f"{prefix}.{kind}.{partition_of(node, partitions)}.{subjects.token(node)}"


def mapping(prefix: str, partitions: int, kinds: tuple[str, ...] = PARTITIONED) -> dict[str, str]:
    """Each kind's source subject and its destination: the node's token kept, the partition
    put before it."""
    check(0, partitions)
    to = f"{{{{partition({partitions},1)}}}}.{{{{wildcard(1)}}}}"
    return {f"{prefix}.{kind}.*": f"{prefix}.{kind}.{to}" for kind in kinds}


def server_config(prefix: str, partitions: int, kinds: tuple[str, ...] = PARTITIONED) -> str:
    """The `mappings` block of a nats-server configuration that turns the partitions on: at
    the top level for the default account, or inside the account the workers publish in."""
    pairs = mapping(prefix, partitions, kinds).items()
    lines = [f'  "{source}": "{destination}"' for source, destination in pairs]
    return "mappings = {\n" + "\n".join(lines) + "\n}\n"


def nsc_commands(
    prefix: str, partitions: int, account: str, kinds: tuple[str, ...] = PARTITIONED
) -> str:
    """The same mapping for an operator-mode deployment, put in the account's JWT (then
    `nsc push`)."""
    return "".join(
        f"nsc add mapping --account {account} --from '{source}' --to '{destination}'\n"
        for source, destination in mapping(prefix, partitions, kinds).items()
    )


def stream_subjects(kind: str, prefix: str = subjects.DEFAULT_PREFIX) -> tuple[str, ...]:
    """What a stream of a per-node `kind` takes: one subject per node as published and, for a
    kind the mapping partitions, one per node and partition as mapped."""
    if kind in PARTITIONED:
        return (f"{prefix}.{kind}.*", f"{prefix}.{kind}.*.*")
    return (f"{prefix}.{kind}.*",)


def node_subjects(kind: str, node: str, prefix: str = subjects.DEFAULT_PREFIX) -> tuple[str, str]:
    """What a node's credentials allow it to publish for `kind`: its subject as published and
    as mapped to any partition (the servers check the mapped one)."""
    return (f"{prefix}.{kind}.{subjects.token(node)}", f"{prefix}.{kind}.*.{subjects.token(node)}")


def consumer_subject(
    kind: str, prefix: str = subjects.DEFAULT_PREFIX, partition: int | None = None
) -> str:
    """What a consumer of `kind` subscribes to: every node in either form (None), or the
    nodes of one partition, which only the mapping gives."""
    if partition is None:
        return f"{prefix}.{kind}.>"
    return f"{prefix}.{kind}.{partition}.*"
