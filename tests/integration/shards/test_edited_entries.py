"""A shards-file entry edited while its process runs (its `log_path` added) is the same
process: its own CPU flags still hold. b11434 prints "no usable GPU found, --gpu-layers option
will be ignored" even for `-ngl 0` (real-b11434/ngl0-lv4.log), so an entry that forgot them
read `cpu_fallback` and fired for a server on the CPU on purpose (issue 65, item 4, case 1).
A stand-in process carries the flags; the real server is the real-engine lane's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from placewatch.schemas import ComputeStatus, GpuSample
from placewatch.worker.engines.evidence.follow import EngineLogs
from placewatch.worker.shards.placements import ShardsFile
from placewatch.worker.shards.shard_pass import ShardPass

from tests.conftest import FIXTURES, SLEEP
from tests.support.eventually import eventually
from tests.support.llama_server import LlamaServers

GPUS = [GpuSample(index=0, uuid="GPU-0", vendor="nvidia")]
NGL0 = FIXTURES / "engine-logs" / "real-b11434" / "ngl0-lv4.log"
ON_PURPOSE = [
    (["-ngl", "0"], {}, "-ngl 0"),
    (["--device", "none"], {}, "--device none"),
    ([], {"LLAMA_ARG_N_GPU_LAYERS": "0"}, "LLAMA_ARG_N_GPU_LAYERS=0"),
    ([], {"LLAMA_ARG_DEVICE": "none"}, "LLAMA_ARG_DEVICE=none"),
]


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


def judge(shards: ShardPass) -> ComputeStatus:
    async def once() -> ComputeStatus:
        async with anyio.create_task_group() as tg:
            assert shards.logs is not None
            await tg.start(shards.logs.run)
            view = await shards.judge(GPUS, gpus_known=True)
            tg.cancel_scope.cancel()
        return next(s for s in view.statuses if s.shard == "a")

    return anyio.run(once, backend="asyncio")


def edited_twice(pid: int, log: Path, tmp_path: Path) -> tuple[ComputeStatus, ComputeStatus]:
    """The entry's verdict placed without its log, then with it added."""
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n')
    watch = ShardPass(
        "n", "s", grace_s=0, shards_file=ShardsFile(shards), discovery=False, logs=EngineLogs()
    )
    before = judge(watch)
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\nlog_path = "{log}"\n')
    return before, judge(watch)


@pytest.mark.parametrize(("args", "env", "said"), ON_PURPOSE, ids=[w for *_, w in ON_PURPOSE])
def test_an_entry_given_its_log_stays_on_the_cpu_on_purpose(
    tmp_path: Path,
    started: list[subprocess.Popen[bytes]],
    args: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    link = tmp_path / "llama-server"
    link.symlink_to(sys.executable)
    log = tmp_path / "server.log"
    log.write_text(NGL0.read_text())  # what b11434 said at -ngl 0, warning and all
    started.append(subprocess.Popen([str(link), "-c", SLEEP, "-m", "m.gguf", *args], env=env))
    before, after = edited_twice(exec_ed(started[0]), log, tmp_path)
    assert (before.verdict, after.verdict) == ("cpu", "cpu"), after.reason
    assert said in after.reason
    assert after.evidence  # its log is read: the warning among its lines


@pytest.mark.parametrize(("args", "env", "said"), ON_PURPOSE, ids=[w for *_, w in ON_PURPOSE])
def test_a_real_server_on_the_cpu_on_purpose_stays_so_when_its_entry_gets_its_log(
    llama_servers: LlamaServers,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    log = tmp_path / "server.log"
    with log.open("ab") as out:
        proc, _ = llama_servers.start(*args, "-lv", "4", stderr=out, env=env)
    before, after = edited_twice(proc.pid, log, tmp_path)
    assert (before.verdict, after.verdict) == ("cpu", "cpu"), after.reason
    assert said in after.reason
