"""Subject, stream and bucket names of the wire contract.

Node and shard names become subject tokens by replacing every character
outside ``A-Z a-z 0-9 _ -`` with ``_``: a dot would split a token, and a
space, ``*`` or ``>`` would break or widen a subscription. The payload
carries the exact names, so nothing is lost by the mapping.
"""

from __future__ import annotations

import re

DEFAULT_PREFIX = "placewatch"

STREAM_EVENTS = "PLACEWATCH_EVENTS"
STREAM_TELEMETRY = "PLACEWATCH_TELEMETRY"
BUCKET_PLACEMENTS = "placewatch_placements"
BUCKET_COMPUTE = "placewatch_compute"

_OUTSIDE_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


def token(name: str) -> str:
    """A node or shard name as one subject token ("gpu node.1" -> "gpu_node_1")."""
    return _OUTSIDE_TOKEN.sub("_", name) or "_"


def telemetry(node: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.telemetry.{token(node)}"


def compute(node: str, shard: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.compute.{token(node)}.{token(shard)}"


def fallback(node: str, shard: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.fallback.{token(node)}.{token(shard)}"


def shard_key(node: str, shard: str) -> str:
    """The key of a shard in the placements and compute buckets."""
    return f"{token(node)}.{token(shard)}"


def all_telemetry(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.telemetry.*"


def all_events(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The subjects the events stream holds."""
    return [f"{prefix}.compute.>", f"{prefix}.fallback.>"]
