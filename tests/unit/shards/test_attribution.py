"""Which processes are a shard's: its pid, its descendants, its group only when it leads it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from placewatch.schemas import GpuProcess, GpuSample
from placewatch.worker.shards.attribution import ProcTable, attribute, owner, parse_stat

from tests.support.eventually import eventually

SLEEP = "import time; time.sleep(60)"
# Starts a child, and a grandchild that double-forks away (reparented, same group).
PARENT = f"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {SLEEP!r}])
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:  # each leads its own session: the group takes the daemonized ones too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def group_members(pgid: int) -> list[int]:
    table = ProcTable()
    return [p for p in psutil.pids() if (s := table.stat(p)) is not None and s[1] == pgid]


def test_parse_stat_reads_after_the_last_parenthesis() -> None:
    assert parse_stat("4242 (llama (server) x) S 1 4242 4242 0 -1") == (1, 4242, None)
    assert parse_stat("garbage") is None
    assert parse_stat("12 (x) S") is None


def test_children_and_reparented_group_members_belong_to_a_group_leader(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    shard = subprocess.Popen([sys.executable, "-c", PARENT], start_new_session=True)
    procs.append(shard)

    def reparented() -> list[int]:
        """Group members the shard is no longer the parent of: the double-forked daemon,
        once its intermediate parent has exited."""
        return [
            p
            for p in group_members(shard.pid)
            if p != shard.pid
            and psutil.Process(p).ppid() not in (shard.pid, 0)
            and psutil.Process(p).ppid() not in group_members(shard.pid)
        ]

    eventually(lambda: bool(psutil.Process(shard.pid).children()) and bool(reparented()))
    child = psutil.Process(shard.pid).children()[0].pid
    daemon = reparented()[0]
    table = ProcTable()
    shards = {shard.pid: "llama-a"}
    assert owner(shard.pid, shards, table) == "llama-a"
    assert owner(child, shards, table) == "llama-a"
    assert psutil.Process(daemon).ppid() != shard.pid  # reparented away
    assert owner(daemon, shards, table) == "llama-a"  # kept by the group
    assert owner(psutil.Process().pid, shards, table) is None


def test_a_shard_that_does_not_lead_its_group_does_not_claim_the_group(
    procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # Two engines started from one shell script: one group, led by the shell.
    script = tmp_path / "start.sh"
    script.write_text(
        f'"{sys.executable}" -c "{SLEEP}" &\n"{sys.executable}" -c "{SLEEP}" &\nwait\n'
    )
    shell = subprocess.Popen(["sh", str(script)], start_new_session=True)
    procs.append(shell)
    eventually(lambda: len(psutil.Process(shell.pid).children()) == 2)
    first, second = sorted(c.pid for c in psutil.Process(shell.pid).children())
    table = ProcTable()
    shards = {first: "a"}
    assert owner(first, shards, table) == "a"
    assert owner(second, shards, table) is None, "a group the shard does not lead was claimed"


def test_invisible_pids_have_no_owner_and_are_not_visible() -> None:
    table = ProcTable()
    missing = max(psutil.pids()) + 100000
    assert not table.visible(missing)
    assert owner(missing, {1: "init"}, table) is None


def test_parse_stat_reads_the_start_time_after_the_last_parenthesis() -> None:
    line = "4242 (llama (server) x) S 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 20 0 7 0 918273 0"
    assert parse_stat(line) == (1, 4242, 918273)
    assert parse_stat("12 (x) S 1 12") == (1, 12, None)
    assert parse_stat("garbage") is None


def test_start_time_tells_this_process_from_one_that_reuses_its_pid() -> None:
    table = ProcTable()
    me = os.getpid()
    started = table.started(me)
    assert started is not None
    # The same clock psutil's create_time is built on: boot time plus ticks.
    ticks = os.sysconf("SC_CLK_TCK")
    assert abs(psutil.boot_time() + started / ticks - psutil.Process(me).create_time()) < 0.05
    missing = max(psutil.pids()) + 100000
    assert table.started(missing) is None


def test_a_read_stands_until_the_process_exits(procs: list[subprocess.Popen[bytes]]) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True)
    procs.append(sleeper)
    table = ProcTable()
    assert table.stat(sleeper.pid) == (os.getpid(), sleeper.pid)
    started = table.started(sleeper.pid)
    assert not table.refresh(), "nothing exited"
    assert table.stat(sleeper.pid) == (os.getpid(), sleeper.pid)
    assert table.started(sleeper.pid) == started
    assert table.used == {sleeper.pid}

    sleeper.kill()
    sleeper.wait()
    assert table.refresh(), "the exit was not noticed"
    assert table.stat(sleeper.pid) is None
    assert not table.refresh(), "an exit is reported once"


def test_keep_only_forgets_the_rest(procs: list[subprocess.Popen[bytes]]) -> None:
    a, b = (
        subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True) for _ in range(2)
    )
    procs += [a, b]
    table = ProcTable()
    assert table.visible(a.pid) and table.visible(b.pid)
    table.keep_only({a.pid})
    b.kill()
    b.wait()
    assert not table.refresh(), "an exit of a process no longer kept was reported"
    assert table.stat(a.pid) == (os.getpid(), a.pid)
    assert table.stat(b.pid) is None


def test_a_table_over_another_proc_reads_again_every_tick(tmp_path: Path) -> None:
    # A /proc of another PID namespace (mounted from a host, say): no pidfd can follow
    # its processes, so no read outlives its tick.
    (tmp_path / "4242").mkdir()
    stat = tmp_path / "4242" / "stat"
    stat.write_text("4242 (llama-server) S 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 20 0 7 0 99 0")
    table = ProcTable(tmp_path)
    assert table.stat(4242) == (1, 4242) and table.started(4242) == 99
    assert table.refresh(), "a table without pidfds must say its reads no longer hold"
    stat.write_text("4242 (llama-server) S 77 77 77 0 -1 4194560 9 0 0 0 3 1 0 0 20 0 7 0 99 0")
    assert table.stat(4242) == (77, 77)


def test_past_its_pidfd_limit_a_table_reads_again_every_tick(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    a, b = (
        subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True) for _ in range(2)
    )
    procs += [a, b]
    table = ProcTable(max_handles=1)
    assert table.stat(a.pid) == (os.getpid(), a.pid)
    assert not table.refresh(), "one pidfd is within the limit"
    assert table.stat(b.pid) == (os.getpid(), b.pid)  # the second one passes the limit
    assert table.refresh(), "past the limit no read may stand for the next tick"
    assert table.stat(a.pid) == (os.getpid(), a.pid) and table.stat(b.pid) == (os.getpid(), b.pid)
    a.kill()
    a.wait()
    assert table.refresh()
    assert table.stat(a.pid) is None


def test_foreign_memory_is_unknown_where_a_holder_went_unread() -> None:
    gpus = [
        GpuSample(
            index=i,
            vendor="intel",
            bus_id=bus,
            memory_used_bytes=10,
            processes=[GpuProcess(pid=7, used_bytes=4)],
        )
        for i, bus in enumerate(["0000:03:00.0", "0000:04:00.0"])
    ]
    out, held = attribute(gpus, {7: "a"}, foreign_unknown={"0000:04:00.0"})
    assert [g.foreign_bytes for g in out] == [6, None]
    assert held == {"a": {0: 4, 1: 4}}
