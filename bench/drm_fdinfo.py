"""A tick's read of every process's DRM clients (worker/gpu/drm_fdinfo): what it costs.

Offered load: 16 shards of 8 processes each (128 processes), each holding two render-node
descriptors (one xe client on each of two GPUs, the second shared with the process before
it, as an inherited descriptor is) among 64 descriptors of ordinary files, in a /proc in a
folder, beside `--others` processes of the node holding 32 ordinary descriptors and no GPU
file. Then the same read of this machine's own /proc: its real processes and real
descriptors (no DRM device here: every link is read, no fdinfo is).

Each figure is the median of `--reads` reads, in ms of CPU (the process's) and of wall
time: steady, as DrmUsage reads most ticks (each link read once), and full (every link
read: the first read, and each RELINK_EVERY-th). The folder is in /dev/shm, in memory as
procfs is.

    .venv/bin/python bench/drm_fdinfo.py [--others 400] [--reads 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from placewatch.worker.gpu.drm_fdinfo import DrmUsage, read_fdinfo

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


def timed(read: Callable[[], object], reads: int) -> tuple[float, float]:
    """Median ms of a read, of CPU and of wall time (the CPU's is what a loaded machine
    does not inflate)."""
    cpu, wall = [], []
    for _ in range(reads):
        started, started_cpu = time.perf_counter(), time.process_time()
        read()
        cpu.append((time.process_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return statistics.median(cpu), statistics.median(wall)


def measure(root: str, reads: int) -> str:
    """A tick's read as it mostly is (the links known: DrmUsage's steady reads) and a full
    one (every link read: the first, and each RELINK_EVERY-th)."""
    usage = DrmUsage(root)
    usage.read()
    steady = timed(usage.read, reads)
    full = timed(lambda: read_fdinfo(root), reads)
    return (
        f"steady {steady[0]:.2f} ms of CPU ({steady[1]:.2f} wall), "
        f"full {full[0]:.2f} ms of CPU ({full[1]:.2f} wall)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", type=int, default=400)
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory, as procfs is
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        count = build(Path(tmp), args.others)
        found = len({u.pid for u in DrmUsage(tmp).read()[0]})
        fake = measure(tmp, args.reads)
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    real = measure("/proc", args.reads)
    fds = sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids if os.path.isdir(f"/proc/{p}/fd"))
    print(f"load: 1-minute load average {os.getloadavg()[0]:.2f}")
    print(
        f"fake /proc, {SHARDS} shards x {PER_SHARD} processes + {args.others} others "
        f"({count} processes, {found} using a GPU): {fake}"
    )
    print(f"this machine's /proc ({len(pids)} processes, {fds} descriptors): {real}")


if __name__ == "__main__":
    main()
