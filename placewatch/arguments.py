"""Values a command line gives that every command reads alike: a limit in seconds, a name.

A timeout of 0 would fail every request at once and be blamed on the server; `inf` or a
year would wait for ever where a person expects an answer, and asyncio's timers refuse
`inf` with an OverflowError. So a limit is a number of seconds above 0, at most a day, and
anything else is one line from argparse and exit 2.
"""

from __future__ import annotations

import argparse
import math

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
