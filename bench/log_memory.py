"""Log memory: the worker's RSS growth while its log readers take an hour of hostile input.

What an hour of a log written to hurt the worker holds, at a realistic rate (--lines-per-s,
1,000), is fed in minutes through the path every followed log takes: one file, read by
LogTail, unwrapped, read by the evidence reader and the requests' reader (follow.py's
_Followed, as EngineLogs runs it). The lines cycle through:

- a request started on a new slot id every line, never ended (llama-server's `launch_slot_`);
- CRI parts (`P`) that never end, and Docker json-file parts on a new stream every line;
- a startup banner every few lines, and the GPU init lines that may come before one;
- a line of 100 KB, now and then.

The file grows to about 0.6 GB an hour of input, in a temporary folder removed at the end.

RSS is read (psutil) after the first tenth of the input, once every structure has been
made, and at the end; the growth between is the figure. Target: at most 20 MiB.

    python bench/log_memory.py [--lines-per-s N] [--hours H]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placewatch.worker.engines.evidence.follow import _Followed, _read_all  # noqa: E402
from placewatch.worker.engines.evidence.lives import newest_life  # noqa: E402
from placewatch.worker.engines.evidence.source import PathLog  # noqa: E402
from placewatch.worker.engines.evidence.tail import LogTail  # noqa: E402

TARGET_MIB = 20
BATCH = 10_000
"""Lines written between two reads: about a MB, as the log thread finds them between looks."""


def hostile(start: int) -> Iterator[str]:
    """Lines of hostile input, numbered from `start`, without end."""
    n = start
    while True:
        n += 1
        kind = n % 10
        if kind < 4:
            yield f"0.03.049.435 I slot launch_slot_: id {n} | task {n} | processing task"
        elif kind == 4:
            yield f"2026-12-06T05:31:02.{n % 10**9:09d}Z stderr P part {n} of a line that never ends"
        elif kind == 5:
            yield json.dumps(
                {"log": f"part {n}", "stream": f"s{n}", "time": "2026-12-06T05:31:02Z"}
            )
        elif kind == 6:
            yield f"build: {n} (1a2b3c4d) with cc (GCC) 13.2.0 for x86_64-linux-gnu"
        elif kind in (7, 8):
            yield f"ggml_cuda_init: found {n % 9} CUDA devices: {'x' * (n % 3000)}"
        elif n % 1000 == 9:
            yield "y" * 100_000  # cut by the tail's bound on a line
        else:
            yield f"load_tensors: offloaded {n % 33}/33 layers to GPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines-per-s", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=1.0)
    args = parser.parse_args()
    total = int(args.lines_per_s * 3600 * args.hours)
    process = psutil.Process()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "hostile.log"
        log.write_text("")
        followed = _Followed(LogTail(PathLog(str(log), os.getpid()), start=newest_life))
        lines = hostile(0)
        fed, base, peak, started, turn = 0, None, 0, time.monotonic(), 0
        while fed < total:
            with log.open("a") as out:
                out.write("\n".join(next(lines) for _ in range(BATCH)) + "\n")
            fed += BATCH
            while True:
                turn += 1
                _read_all([followed], time.monotonic() + 10, turn)
                if not followed.tail.behind:
                    break
            if fed >= total // 10:
                gc.collect()
                rss = process.memory_info().rss
                base = rss if base is None else base
                peak = max(peak, rss)
        gc.collect()
        end = process.memory_info().rss
    took = time.monotonic() - started
    growth = (end - (base or end)) / 2**20
    print(
        f"log memory: {fed:,} hostile lines ({args.hours:g} h at {args.lines_per_s:,}/s) "
        f"in {took:.0f} s (load {os.getloadavg()[0]:.2f})"
    )
    highest = (peak - (base or peak)) / 2**20
    print(
        f"  RSS {base / 2**20 if base else 0:.1f} MiB after the first tenth, {end / 2**20:.1f} "
        f"MiB at the end: growth {growth:+.2f} MiB, at most {highest:+.2f} MiB on the way "
        f"(target at most {TARGET_MIB} MiB)"
    )
    sys.exit(0 if max(growth, highest) <= TARGET_MIB else 1)


if __name__ == "__main__":
    main()
