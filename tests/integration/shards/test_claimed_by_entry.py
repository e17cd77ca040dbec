"""A shards-file entry that claims a process discovery already judged: the discovered shard
leaves saying its process runs on as that entry, which is judged in the same tick, so a
fallback hands over rather than reads as over (issue 65, item 4, case 8). A stand-in process,
and the real-engine lane's server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from placewatch.schemas import GpuSample
from placewatch.worker.bus.events import EventTracker
from placewatch.worker.shards.placements import ShardsFile
from placewatch.worker.shards.shard_pass import ShardPass, ShardsView

from tests.conftest import SLEEP, free_port
from tests.support.eventually import eventually
from tests.support.llama_server import LlamaServers

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


def judge(shards: ShardPass) -> ShardsView:
    return anyio.run(shards.judge, GPUS, True, backend="asyncio")


def handed_over(pid: int, port: int, tmp_path: Path) -> None:
    """Discovered and firing, then claimed by an entry: both said in one tick."""
    shards = tmp_path / "shards.toml"
    shards.write_text("")
    watch = ShardPass("n", "s", grace_s=0, shards_file=ShardsFile(shards))
    watch.walks.every_s = 0.0  # walked every tick
    events = EventTracker("n", "s")
    found = f"llama-server-{port}"
    first = judge(watch)
    (discovered,) = [s for s in first.statuses if s.shard == found]
    assert (discovered.verdict, discovered.pid) == ("cpu_fallback", pid)
    events.changes(first.statuses, first.gone)
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n')
    view = judge(watch)
    (gone,) = [s for s in view.gone if s.shard == found]
    assert gone.reason == (
        f"no longer watched: its process {pid} runs on, watched as shards-file entry 'a'"
    )
    (placed,) = [s for s in view.statuses if s.shard == "a"]
    assert (placed.verdict, placed.pid) == ("cpu_fallback", pid)
    said = {o.msg_id.split(".", 1)[1] for o in events.changes(view.statuses, view.gone)}
    assert {f"{found}.s.2.resolved", "a.s.1.firing"} <= said


def test_an_entry_claiming_a_discovered_stand_in_hands_its_fallback_over(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    link = tmp_path / "llama-server"
    link.symlink_to(sys.executable)
    port = free_port()
    started.append(
        subprocess.Popen(
            [str(link), "-c", SLEEP, "-m", "m.gguf", "--port", str(port), "-ngl", "99"],
            env={"CUDA_VISIBLE_DEVICES": "0"},
        )
    )
    handed_over(exec_ed(started[0]), port, tmp_path)


def test_an_entry_claiming_a_discovered_real_server_hands_its_fallback_over(
    llama_servers: LlamaServers, tmp_path: Path
) -> None:
    proc, port = llama_servers.start("-ngl", "99", env={"CUDA_VISIBLE_DEVICES": "0"})
    handed_over(proc.pid, port, tmp_path)
