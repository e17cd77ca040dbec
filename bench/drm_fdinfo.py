"""A tick's read of every process's DRM clients (worker/gpu/drm_fdinfo): what it costs.

Offered load: 16 shards of 8 processes each (128 processes), each holding two render-node
descriptors (one xe client on each of two GPUs, the second shared with the process before
it, as an inherited descriptor is) among 64 descriptors of ordinary files, in a /proc in a
folder, beside `--others` processes of the node holding 32 ordinary descriptors and no GPU
file. Then the same read of this machine's own /proc: its real processes and real
descriptors (no DRM device here: every link is read, no fdinfo is).

Each figure is the median of `--reads` reads by one DrmUsage, as a tick takes them, in ms
of wall time, and per process read.

    .venv/bin/python bench/drm_fdinfo.py [--others 400] [--reads 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from placewatch.worker.gpu.drm_fdinfo import DrmUsage

from tests.support.drm_proc import RENDER, add_process, fdinfo

SHARDS, PER_SHARD, OTHER_FDS = 16, 8, 64


def build(root: Path, others: int) -> int:
    """The fake /proc; the number of processes in it."""
    pid = 1000
    for shard in range(SHARDS):
        for _ in range(PER_SHARD):
            gpu0 = fdinfo("xe-dgpu.txt", client_id=str(pid))
            gpu1 = fdinfo("xe-dgpu.txt", client_id=str(pid - pid % 2), pdev="0000:04:00.0")
            add_process(root, pid, {3: (RENDER, gpu0), 4: ("/dev/dri/renderD136", gpu1)}, OTHER_FDS)
            pid += 1
        del shard
    for i in range(others):
        add_process(root, 100_000 + i, {}, 32)
    return SHARDS * PER_SHARD + others


def timed(usage: DrmUsage, reads: int) -> tuple[float, int]:
    """Median ms of a read, and the processes found using a GPU in the last one."""
    times, uses = [], []
    for _ in range(reads):
        started = time.perf_counter()
        uses, _ = usage.read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), len({u.pid for u in uses})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", type=int, default=400)
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        count = build(Path(tmp), args.others)
        fake_ms, found = timed(DrmUsage(tmp), args.reads)
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    real_ms, _ = timed(DrmUsage("/proc"), args.reads)
    fds = sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids if os.path.isdir(f"/proc/{p}/fd"))
    print(f"load: 1-minute load average {os.getloadavg()[0]:.2f}")
    print(
        f"fake /proc, {SHARDS} shards x {PER_SHARD} processes + {args.others} others "
        f"({count} processes, {found} using a GPU): {fake_ms:.2f} ms a tick, "
        f"{fake_ms * 1000 / count:.1f} us a process"
    )
    print(
        f"this machine's /proc ({len(pids)} processes, {fds} descriptors): {real_ms:.2f} ms "
        f"a tick, {real_ms * 1000 / max(len(pids), 1):.1f} us a process"
    )


if __name__ == "__main__":
    main()
