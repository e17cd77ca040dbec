"""A placement's `match` on a hostile command line: Python's re, the regex module, and the
worker's search (the regex module with its per-line timeout and per-tick budget), side by side.

The command line is `--port` repeated, which anyone on the node can start a process with (one
argument may hold 128 KiB); the pattern is an ordinary one, `.*--port.*8081`. re's time grows
with the cube of the line's length, so it is measured on short lines and the growth printed;
the worker's search is measured on the 120 KB line itself. Also: the one-time cost of a long
literal in the regex module (its first search of a line as long as itself), which
`compiled_match` pays when the placement is read.

    python bench/match_search.py
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placewatch.worker.shards.liveness import SlowPattern, first_match  # noqa: E402
from placewatch.worker.shards.placements import MATCH_BUDGET_S, MATCH_LINE_S  # noqa: E402

PATTERN = r".*--port.*8081"
HOSTILE = "--port" * 20_000


def seconds(work: Callable[[], object]) -> float:
    """Wall time of one call; a search cut short counts as ended."""
    started = time.perf_counter()
    with contextlib.suppress(TimeoutError, SlowPattern):
        work()
    return time.perf_counter() - started


def main() -> None:
    print(f"`{PATTERN}` searched in `--port` repeated (no match)")
    print(f"{'line':>9}{'re':>11}{'regex':>11}{'re/regex':>10}")
    last = 0.0
    for reps in (200, 400, 800):
        line = "--port" * reps
        took_re = seconds(partial(re.search, PATTERN, line))
        took_regex = seconds(partial(regex.search, PATTERN, line))
        growth = f"  ({took_re / last:.1f}x the line half as long)" if last else ""
        last = took_re
        print(
            f"{len(line):>7} B{took_re * 1e3:>8.1f} ms{took_regex * 1e3:>8.3f} ms"
            f"{took_re / took_regex:>9.0f}x{growth}"
        )
    cube = last * (len(HOSTILE) / (800 * 6)) ** 3
    print(f"re on the {len(HOSTILE):,} B line, from that growth: about {cube / 3600:.0f} hours")
    took = seconds(lambda: regex.search(PATTERN, HOSTILE, timeout=60))
    print(f"regex on it, no timeout: {took * 1e3:.0f} ms")
    lines = [(0.0, 1, HOSTILE)]
    took = seconds(lambda: first_match(PATTERN, lines, time.monotonic() + MATCH_BUDGET_S))
    print(
        f"the worker's search on it: {took * 1e3:.1f} ms "
        f"(at most {MATCH_LINE_S * 1e3:g} ms a line, {MATCH_BUDGET_S * 1e3:g} ms a tick)"
    )
    many = [(0.0, pid, HOSTILE) for pid in range(50)]
    took = seconds(lambda: first_match(PATTERN, many, time.monotonic() + MATCH_BUDGET_S))
    print(f"the worker's search on 50 such lines: {took * 1e3:.1f} ms")
    for size in (256, 1024):
        compiled = regex.compile("z" * size)
        took = seconds(partial(compiled.search, " " * size))
        print(f"a {size}-character literal's first search in the regex module: {took * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
