"""Values a command line gives that every command reads alike: a limit in seconds, a name, a
partition (`P/N`), a number of partitions; and the parser every command's line is read with.

A timeout of 0 would fail every request at once and be blamed on the server; `inf` or a
year would wait for ever where a person expects an answer, and asyncio's timers refuse
`inf` with an OverflowError. So a limit is a number of seconds above 0, at most a day, and
anything else is one line from argparse and exit 2.
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from placewatch.schemas import partitions
from placewatch.schemas.printable import printable
from placewatch.schemas.subjects import MAX_NAME_BYTES

MOST_S = 86400.0
MOST_PARTITIONS = 1024
"""The largest N of the servers' partition mapping a command takes. nats-server 2.10 keeps N
as a 32-bit integer (`{{partition(N,1)}}`, server/subject_transform.go), so a larger one is
another N to the servers than to us; and each partition is a consumer to run (an exporter, a
watch): 10,000 nodes in 1,024 partitions are ten a consumer, finer than any fleet needs. The
exporter's check of the mapping tries every N up to this one (consumer/mapping.py)."""
EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse's parser, saying a bad command line in one line (`placewatch watch: error:
    argument --wait: ...`) and exit 2, without the usage before it: the usage of a command
    with twenty flags buried the one line that said what was wrong. Its commands' parsers are
    of this class too (add_subparsers makes them of the parser's own class)."""

    def error(self, message: str) -> NoReturn:
        """One line, whatever the arguments it quotes hold (schemas/printable.py)."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {printable(message)}\n")


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
    _check_count(count)
    try:
        partitions.check(partition, count)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return partition, count


def partitions_argument(text: str) -> int:
    """The N of the servers' partition mapping, 1 to MOST_PARTITIONS."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of partitions: give the N of the servers' partition "
            f"mapping, 1 to {MOST_PARTITIONS}"
        ) from None
    _check_count(count)
    return count


def _check_count(count: int) -> None:
    if not 1 <= count <= MOST_PARTITIONS:
        raise argparse.ArgumentTypeError(
            f"{count} partitions: give the N of the servers' partition mapping, 1 to "
            f"{MOST_PARTITIONS} (docs/operations.md, Partitions)"
        )
