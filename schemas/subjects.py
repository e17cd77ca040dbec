"""Every subject, wildcard and key of the wire contract, built in one place.

Node and shard names become subject tokens and KV key parts one-to-one: every
byte of the name's UTF-8 outside ``A-Z a-z 0-9 _ -`` is written as ``=XX``
(uppercase hex), ``=`` itself included, so ``llama-3.1-8b`` travels as
``llama-3=2E1-8b`` and ``a.b`` as ``a=2Eb`` while ``a_b`` stays as it is. A
dot would split a token and a space, ``*`` or ``>`` would break or widen a
subscription; and two names never share a subject, a key or an event id. (The
first rule replaced those characters with ``_``, which let ``a.b`` and ``a_b``
share a subject and lose events: schema 2 changed it.) ``name()`` reads a
token back.

The streams and buckets these subjects are kept in, and their names under a
prefix, are described in ``streams.py``; a KV bucket's values travel on
``$KV.<bucket>.<key>``. ``partitions.py`` has the per-node subjects as the
servers' partition mapping rewrites them, and what subscribes to them.
"""

from __future__ import annotations

import re

DEFAULT_PREFIX = "placewatch"
DEFAULT_PORT = 4222
LOCAL_URL = f"nats://127.0.0.1:{DEFAULT_PORT}"
"""Where `placewatch run` puts its embedded server by default, and where the commands that read
the bus look when no server is given."""

MAX_NAME_BYTES = 128
"""The longest node or shard name, in bytes of UTF-8: its token is at most three times that,
well inside what a subject and a KV key may hold."""

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_IS_TOKEN_AS_IT_IS = re.compile(r"[A-Za-z0-9_-]+").fullmatch
_ESCAPE = re.compile(r"=([0-9A-F]{2})")
_TOKEN = re.compile(r"(?:[A-Za-z0-9_-]|=[0-9A-F]{2})+")


def token(name: str) -> str:
    """A node or shard name as one subject token ("llama-3.1-8b" -> "llama-3=2E1-8b").

    Raises ValueError for an empty name, which has no token."""
    if not name:
        raise ValueError("an empty name has no subject token; give the node or shard a name")
    if _IS_TOKEN_AS_IT_IS(name):
        return name  # the common case, and the cheap one
    return "".join(chr(b) if b in _SAFE else f"={b:02X}" for b in name.encode())


def name(token_: str) -> str:
    """The name a token stands for ("llama-3=2E1-8b" -> "llama-3.1-8b").

    Raises ValueError for text that no name gives as its token."""
    if not _TOKEN.fullmatch(token_):
        raise ValueError(f"{token_!r} is not a subject token of a name")
    raw = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), token_).encode("latin-1")
    try:
        decoded = raw.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{token_!r} is not the token of any UTF-8 name") from None
    if token(decoded) != token_:
        raise ValueError(f"{token_!r} is not how {decoded!r} is written as a token")
    return decoded


NODE_KINDS = ("telemetry", "inventory", "forgotten")
"""The kinds of message about a node alone, each on `<prefix>.<kind>.<node>`."""
SHARD_KINDS = ("compute", "fallback")
"""The kinds of message about one shard of a node, each on `<prefix>.<kind>.<node>.<shard>`."""
PARTITIONED = ("telemetry", "inventory")
"""The kinds of NODE_KINDS that the servers' partition mapping also writes as
`<prefix>.<kind>.<partition>.<node>` (partitions.py). A new per-node kind is one more name
here."""


def carries(subject: str, node: str, shard: str | None = None) -> bool:
    """Whether `subject` is one the contract gives a message about `node` (and its `shard`):
    `<prefix>.<kind>.<node>` (`<prefix>.<kind>.<partition>.<node>` as mapped), or
    `<prefix>.<kind>.<node>.<shard>`, of a kind of that many names; a KV key of the node
    (`$KV.<bucket>.<node>[.<shard>]`, or the key alone). Every token is where the contract puts
    it: a node allowed its own subjects cannot speak for another by adding tokens after its
    own (`placewatch.fallback.gpu-07.gpu-08.llm` is no subject of gpu-08's shard), so a reader
    that takes only such messages takes no node's word about another node
    (docs/operations.md, Threat model)."""
    if not node or shard == "":
        return False  # no name has an empty token
    tokens = subject.split(".")
    own = [token(node)] if shard is None else [token(node), token(shard)]
    if tokens[-len(own) :] != own or len(tokens) < len(own):
        return False
    before = tokens[: -len(own)]
    if not before:
        return True  # the key alone, as a bucket's reader is given it
    if before[0] == "$KV":
        return len(before) == 2
    kinds = NODE_KINDS if shard is None else SHARD_KINDS
    if shard is None and before[-1].isdigit() and len(before) >= 2:
        return before[-2] in PARTITIONED
    return before[-1] in kinds


def node_of(subject: str) -> str:
    """The node a subject of the contract is about, by where the contract puts its token
    (carries); the token itself where it is no name's, or "?" where the subject has none."""
    tokens = subject.split(".")
    if tokens[0] == "$KV":
        found = tokens[2] if len(tokens) > 2 else "?"
    elif len(tokens) >= 3 and tokens[-3] in SHARD_KINDS:
        found = tokens[-2]
    else:
        found = tokens[-1]
    try:
        return name(found)
    except ValueError:
        return found


def covers(pattern: str, subject: str) -> bool:
    """Whether a subscription or stream taking `pattern` takes every subject `subject` names.

    Both may hold NATS wildcards: `*` stands for one token, `>` for one or more
    at the end. So `placewatch.>` covers `placewatch.compute.>`, while
    `placewatch.compute.*` does not (the events' subjects have two tokens after
    `compute`), and no pattern covers a wildcard with a literal token.
    """
    want, have = subject.split("."), pattern.split(".")
    for i, part in enumerate(have):
        if part == ">":
            return i < len(want)
        if i >= len(want) or want[i] == ">" or part not in ("*", want[i]):
            return False
    return len(have) == len(want)


# --- what one node publishes --------------------------------------------------------------


def telemetry(node: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.telemetry.{token(node)}"


def inventory(node: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.inventory.{token(node)}"


def compute(node: str, shard: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.compute.{token(node)}.{token(shard)}"


def fallback(node: str, shard: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.fallback.{token(node)}.{token(shard)}"


def forgotten(node: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Where `placewatch forget` says the node is gone for good (a NodeForgotten)."""
    return f"{prefix}.forgotten.{token(node)}"


def service(node: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The group of a node's micro service endpoints (`.telemetry`, `.inventory`, `.shards`,
    `.recheck`)."""
    return f"{prefix}.service.{token(node)}"


def inbox(node: str) -> str:
    """The prefix of the replies a node's worker asks for, so that its credentials may
    subscribe to its own replies only (docs/operations.md)."""
    return f"_INBOX.{token(node)}"


# --- what consumers subscribe to ----------------------------------------------------------


def all_compute(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.compute.>"


def all_fallback(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.fallback.>"


def all_forgotten(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.forgotten.*"


def all_events(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The subjects the events stream holds."""
    return [all_compute(prefix), all_fallback(prefix)]


# --- the KV buckets -----------------------------------------------------------------------


def shard_key(node: str, shard: str) -> str:
    """The key of a shard in the placements and compute buckets."""
    return f"{token(node)}.{token(shard)}"


def node_keys(node: str) -> str:
    """The keys of one node's shards in the placements and compute buckets: every key under
    the node's token, so that a key whose shard part is not one token is seen and refused
    rather than never read."""
    return f"{token(node)}.>"


def lease_key(node: str) -> str:
    """The key of a node's lease in the leases bucket: one live worker per node name."""
    return token(node)


def kv_stream(bucket: str) -> str:
    """The JetStream stream that holds a KV bucket."""
    return f"KV_{bucket}"


def kv_subject(bucket: str, key: str = ">") -> str:
    """The subject a bucket's value for `key` (or a wildcard of keys) travels on."""
    return f"{kv_prefix(bucket)}{key}"


def kv_prefix(bucket: str) -> str:
    return f"$KV.{bucket}."


KV_OPERATION = "KV-Operation"
"""The header that marks a KV message as a delete or purge rather than a value."""
KV_DELETED = ("DEL", "PURGE")
