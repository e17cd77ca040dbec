"""Values a command line gives that every command reads alike: a limit in seconds, a name, a
partition (`P/N`).

A timeout of 0 would fail every request at once and be blamed on the server; `inf` or a
year would wait for ever where a person expects an answer, and asyncio's timers refuse
`inf` with an OverflowError. So a limit is a number of seconds above 0, at most a day, and
anything else is one line from argparse and exit 2.
"""

from __future__ import annotations

import argparse
import math

from placewatch.schemas import partitions
from placewatch.schemas.subjects import MAX_NAME_BYTES

MOST_S = 86400.0


def seconds(text: str) -> float:
    """A limit in seconds, above 0 and at most MOST_S; argparse's error otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MOST_S:  # NaN and inf too
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a limit: give a number of seconds above 0, at most {MOST_S:g}"
        )
    return value


def node_name(text: str) -> str:
    """A node's name as the contract takes it: 1 to MAX_NAME_BYTES bytes of UTF-8."""
    if not 0 < len(text.encode()) <= MAX_NAME_BYTES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a node's name: give one of 1 to {MAX_NAME_BYTES} bytes"
        )
    return text


def partition_argument(text: str) -> tuple[int, int]:
    """`P/N` as (P, N), or an error argparse prints, saying what to give."""
    p, _, n = text.partition("/")
    try:
        partition, count = int(p), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not P/N: give a partition and the N of the servers' partition "
            "mapping, such as 2/4"
        ) from None
    try:
        partitions.check(partition, count)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return partition, count
