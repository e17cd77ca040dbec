"""A new engine process is found and judged in the tick after it starts, not at the next full
walk of the processes: each tick looks at the pids it has not seen (discovered.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from placewatch.schemas import ComputeStatus, GpuSample
from placewatch.worker.shards.shard_pass import ShardPass

from tests.conftest import SLEEP, free_port
from tests.support.eventually import eventually

GPUS = [GpuSample(index=0, uuid="GPU-0", vendor="nvidia")]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def exec_ed(proc: subprocess.Popen[bytes]) -> int:
    """Its pid, once its command line is its own: for a moment after Popen returns, /proc
    shows the parent's, or nothing."""
    eventually(lambda: psutil.Process(proc.pid).cmdline()[1:2] == ["-c"], 10, what="its exec")
    return proc.pid


def judge(shards: ShardPass) -> dict[str, ComputeStatus]:
    async def once() -> dict[str, ComputeStatus]:
        view = await shards.judge(GPUS, gpus_known=True)
        return {s.shard: s for s in view.statuses}

    return anyio.run(once, backend="asyncio")


def test_an_engine_started_between_walks_is_judged_at_the_next_tick(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    shards = ShardPass("n", "s", grace_s=0)
    shards.walks.every_s = 3600.0  # after the first tick's walk, no other is due
    judge(shards)
    link = tmp_path / "llama-server"
    link.symlink_to(sys.executable)
    port = free_port()
    started.append(
        subprocess.Popen(
            [str(link), "-c", SLEEP, "-m", "m.gguf", "--port", str(port), "-ngl", "99"],
            env={"CUDA_VISIBLE_DEVICES": "0"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    exec_ed(started[0])
    status = judge(shards).get(f"llama-server-{port}")
    assert status is not None and status.pid == started[0].pid
    assert status.verdict == "cpu_fallback"  # no memory on the GPU it asked for
