"""What `placewatch sample` pays to import, beside what its stack alone pays.

Runs `python -X importtime` on the command and on the bare imports of its
stack (the interpreter, anyio with asyncio, msgspec, psutil, logging and
argparse), each --runs times in turn, and prints the medians: the sum of the
top-level imports' cumulative times, as -X importtime reports them. The stack
is the floor: nothing placewatch does can import less than it.

    .venv/bin/python bench/import_time.py --runs 15
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

TARGET_MS = 120.0
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")

CASES = {
    "python -c pass": ["-c", "pass"],
    "the stack (anyio, msgspec, psutil, logging, argparse)": [
        "-c",
        "import anyio, anyio.to_thread, msgspec, psutil, logging, argparse",
    ],
    "placewatch sample": ["-m", "placewatch", "sample"],
}


def imported_ms(args: list[str]) -> float:
    """The sum of the top-level imports' cumulative times of one run, in ms."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, check=True
    )
    total = 0
    for line in done.stderr.splitlines():
        match = _LINE.match(line)
        if match is not None and not match.group(3):
            total += int(match.group(2))
    return total / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of each, taken in turn")
    runs = parser.parse_args().runs
    found: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, args in CASES.items():
            found[name].append(imported_ms(args))
    medians = {name: statistics.median(v) for name, v in found.items()}
    print(f"imports, -X importtime, {runs} runs of each taken in turn (median, min, max ms)")
    for name, values in found.items():
        print(f"  {name:56s} {medians[name]:7.1f} {min(values):7.1f} {max(values):7.1f}")
    sample, stack = medians["placewatch sample"], medians[next(iter(list(CASES)[1:2]))]
    print(
        f"placewatch sample: {sample:.1f} ms (target {TARGET_MS:g}); its stack alone "
        f"{stack:.1f} ms ({stack / TARGET_MS:.2f} of the target); placewatch's own part "
        f"{sample - stack:.1f} ms"
    )


if __name__ == "__main__":
    main()
