"""The shard pass across ticks: a shard's process is followed, and noticed when it changes;
its engine's log read through EngineLogs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import psutil
import pytest

from placewatch.schemas import ComputeStatus, GpuHealth, GpuProcess, GpuSample
from placewatch.worker.bus.events import EventTracker
from placewatch.worker.engines.evidence.follow import EngineLogs
from placewatch.worker.gpu import health
from placewatch.worker.gpu.nvml import NvmlSource
from placewatch.worker.shards import cgroup, refused, shard_pass, verdict
from placewatch.worker.shards.placements import ShardsFile
from placewatch.worker.shards.shard_pass import ShardPass
from placewatch.worker.shards.verdict import Judgement, Observation

from tests.conftest import FIXTURES
from tests.support.fake_nvml import FakeNvml

MATCH = "sleep 3601.25"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def sleeper(started: list[subprocess.Popen[bytes]], argv: str = MATCH) -> int:
    started.append(subprocess.Popen(argv.split()))
    return started[-1].pid


def gpu_listing(*pids: int) -> list[GpuSample]:
    return [
        GpuSample(
            index=0,
            uuid="GPU-0",
            memory_used_bytes=8 << 30,
            processes=[GpuProcess(pid=p, used_bytes=4 << 30) for p in pids],
        )
    ]


def judge(shards: ShardPass, gpus: list[GpuSample]) -> dict[str, ComputeStatus]:
    async def once() -> dict[str, ComputeStatus]:
        async with anyio.create_task_group() as tg:
            if shards.logs is not None:
                await tg.start(shards.logs.run)
            view = await shards.judge(gpus, gpus_known=True)
            tg.cancel_scope.cancel()
        return {s.shard: s for s in view.statuses}

    return anyio.run(once, backend="asyncio")


def test_a_shard_whose_process_exits_is_gone_and_a_match_finds_the_next_one(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # A command line of this test's own: the suite's other workers run sleepers too.
    mine = f"sleep 3602.{os.getpid()}"
    by_pid, by_match = sleeper(sleepers, "sleep 3601.5"), sleeper(sleepers, mine)
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "fixed"\npid = {by_pid}\ngpus = [0]\n\n'
        f'[[shard]]\nid = "found"\nmatch = "{mine}$"\ngpus = [0]\n'
    )
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    first = judge(watch, gpu_listing(by_pid, by_match))
    assert first["fixed"].verdict == "gpu" and first["fixed"].pid == by_pid
    assert first["found"].verdict == "gpu" and first["found"].pid == by_match

    # Steady ticks: the same processes, the same verdicts.
    assert judge(watch, gpu_listing(by_pid, by_match))["fixed"].verdict == "gpu"

    # The process exits: a shard placed by pid is gone.
    sleepers[0].kill()
    sleepers[0].wait()
    after = judge(watch, gpu_listing(by_match))
    assert after["fixed"].verdict == "gone"
    assert after["found"].pid == by_match and after["found"].verdict == "gpu"

    # One placed by match follows its engine to the process that replaced it.
    sleepers[1].kill()
    sleepers[1].wait()
    successor = sleeper(sleepers, mine)
    last = judge(watch, gpu_listing(successor))
    assert last["found"].pid == successor and last["found"].verdict == "gpu"


def test_a_log_placed_later_is_read_and_its_word_outranks_memory(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n')
    logs = EngineLogs()
    watch = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, logs=logs
    )
    assert judge(watch, gpu_listing(pid))["a"].verdict == "gpu"  # its memory alone
    log = tmp_path / "a.log"
    log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\nlog_path = "{log}"\n')
    status = judge(watch, gpu_listing(pid))["a"]
    assert status.verdict == "cpu_fallback", status.reason
    assert (status.layers_offloaded, status.layers_total) == (0, 33)
    assert status.evidence == ["load_tensors: offloaded 0/33 layers to GPU"]


# A shard that does not lead its group (started with the test's own group): only descent
# makes a process its own. Its child starts the process that computes, and sleeps.
CHAIN = """
import subprocess, sys, time
child = "import subprocess, time; subprocess.Popen(['sleep', '3601.75']); time.sleep(3600)"
subprocess.Popen([sys.executable, "-c", child])
time.sleep(3600)
"""


def test_a_process_whose_parent_exits_is_worked_out_again(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sleepers.append(subprocess.Popen([sys.executable, "-c", CHAIN]))
    shard = psutil.Process(sleepers[0].pid)
    deadline = time.monotonic() + 10
    while len(shard.children(recursive=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    (middle,) = shard.children()
    (computing,) = middle.children()
    try:
        shards = tmp_path / "shards.toml"
        shards.write_text(f'[[shard]]\nid = "a"\npid = {shard.pid}\ngpus = [0]\n')
        watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
        listing = gpu_listing(computing.pid)
        for _ in range(3):  # the owner, once worked out, stands while nothing exits
            status = judge(watch, listing)["a"]
            assert status.verdict == "gpu" and status.devices[0].used_bytes == 4 << 30

        # The middle process exits: the computing one is reparented away from the shard,
        # and it was never in a group the shard leads, so it is no longer the shard's.
        middle.kill()  # a zombie until the shard reaps it, which it never does
        deadline = time.monotonic() + 10
        while computing.ppid() == middle.pid and time.monotonic() < deadline:
            time.sleep(0.02)
        after = judge(watch, listing)["a"]
        assert after.verdict == "cpu_fallback", after.reason
        assert after.devices == []
    finally:
        computing.kill()


def test_a_shard_on_the_cpu_beside_an_idle_gpu_read_through_nvml_is_a_fallback(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # An idle GPU whose driver keeps 1.5 GiB for itself, more than the memory no listed
    # process may hold before the worker suspects processes it cannot see. Read through
    # NVML, that reserve is not memory in use, as nvidia-smi does not count it either.
    total = 143771 << 20
    idle = GpuSample(
        index=0,
        uuid="GPU-0",
        name="NVIDIA H200",
        memory_total_bytes=total,
        memory_used_bytes=0,
        memory_free_bytes=total - (1536 << 20),
    )
    gpus, status = anyio.run(NvmlSource(FakeNvml([idle])).sample, backend="asyncio")
    assert status.ok and gpus[0].memory_used_bytes == 0
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {sleeper(sleepers)}\ngpus = [0]\n')
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    assert judge(watch, gpus)["a"].verdict == "cpu_fallback"


def judge_known(shards: ShardPass, gpus: list[GpuSample], known: bool) -> dict[str, ComputeStatus]:
    async def once() -> dict[str, ComputeStatus]:
        return {s.shard: s for s in (await shards.judge(gpus, gpus_known=known)).statuses}

    return anyio.run(once, backend="asyncio")


def test_a_verdict_stands_marked_stale_for_as_long_as_the_gpu_tools_fail(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n')
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    good = judge_known(watch, gpu_listing(pid), known=True)["a"]
    assert (good.verdict, good.stale, good.stale_since) == ("gpu", False, None)
    # The GPU tool fails: no GPUs listed, none known. The last verdict stands, marked stale
    # since the last reading, however many reads fail: lost evidence is not a verdict.
    for _ in range(12):
        held = judge_known(watch, [], known=False)["a"]
        assert (held.verdict, held.stale, held.devices) == ("gpu", True, good.devices)
        assert held.stale_since == good.time  # the status the last evidence gave
        since = f"{held.stale_since:%Y-%m-%dT%H:%M:%SZ}"
        assert held.reason == (
            f"holds 4.0 GiB on GPU 0 as placed (stale since {since}: the GPU tools have not "
            "answered; the verdict stands until evidence says otherwise)"
        )
    # The tool answers again: judged afresh, not stale.
    fresh = judge_known(watch, gpu_listing(pid), known=True)["a"]
    assert (fresh.stale, fresh.stale_since) == (False, None)
    assert judge_known(watch, [], known=False)["a"].stale is True


def test_gpu_readings_a_tick_late_hold_the_verdict_unmarked_until_they_are_lost(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n')
    watch = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, late_s=0.3
    )
    good = judge_known(watch, gpu_listing(pid), known=True)["a"]
    # A read that answered after the tick's deadline: the verdict stands as it was (the
    # same status: nothing new to publish), not marked stale.
    late = judge_known(watch, [], known=False)["a"]
    assert (late.verdict, late.stale, late.reason) == ("gpu", False, good.reason)
    assert late.devices == good.devices
    # Missing for longer than late_s: lost, and held stale since the last reading.
    deadline = time.monotonic() + 5
    while not (lost := judge_known(watch, [], known=False)["a"]).stale:
        assert time.monotonic() < deadline, lost
    assert (lost.verdict, lost.stale_since) == ("gpu", good.time)


def test_a_held_verdict_is_the_process_s_own_and_its_exit_is_evidence(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    first, second = sleeper(sleepers), sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {first}\ngpus = [0]\n')
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    idle = judge_known(watch, gpu_listing(second), known=True)["a"]  # GPU 0 holds another's
    assert idle.verdict == "cpu_fallback"
    assert judge_known(watch, [], known=False)["a"].verdict == "cpu_fallback"
    # Its process exits while the tools are silent: that is evidence, and it says `gone`.
    sleepers[0].kill()
    sleepers[0].wait()
    gone = judge_known(watch, [], known=False)["a"]
    assert (gone.verdict, gone.stale) == ("gone", False)
    # Placed anew on another process: nothing of the first one's verdict is held for it.
    shards.write_text(f'[[shard]]\nid = "a"\npid = {second}\ngpus = [0]\n')
    new = judge_known(watch, [], known=False)["a"]
    assert (new.verdict, new.stale) == ("unknown", False)
    assert "the GPU tools did not answer" in new.reason


def test_an_error_judging_one_shard_makes_it_unknown_and_spares_the_others(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = sleeper(sleepers), sleeper(sleepers, "sleep 3601.5")
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "a"\npid = {a}\ngpus = [0]\n\n[[shard]]\nid = "b"\npid = {b}\ngpus = [0]\n'
    )
    real = verdict.judge

    def failing_for_a(obs: Observation, gpus: list[GpuSample]) -> Judgement:
        if obs.placement.spec.id == "a":
            raise OverflowError("Python int too large to convert to C int")
        return real(obs, gpus)

    monkeypatch.setattr(shard_pass, "judge", failing_for_a)
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    statuses = judge(watch, gpu_listing(a, b))
    assert statuses["a"].verdict == "unknown"
    assert statuses["a"].reason == (
        "placewatch could not judge this shard (OverflowError: Python int too large to convert "
        "to C int); please report it with the output of `placewatch sample --json`"
    )
    assert statuses["b"].verdict == "gpu"


def test_a_shard_seen_as_last_tick_is_not_judged_again_and_a_change_is_at_once(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n')
    judged: list[dict[int, int | None]] = []
    real = verdict.judge

    def counted(obs: Observation, gpus: list[GpuSample]) -> Judgement:
        judged.append(obs.held)
        return real(obs, gpus)

    monkeypatch.setattr(shard_pass, "judge", counted)
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    first, again = judge(watch, gpu_listing(pid))["a"], judge(watch, gpu_listing(pid))["a"]
    assert judged == [{0: 4 << 30}]  # the second tick saw the same: judged once
    assert (again.verdict, again.reason, again.devices) == (
        first.verdict,
        first.reason,
        first.devices,
    )
    assert again.time > first.time
    grown = [
        msgspec.structs.replace(
            gpu_listing(pid)[0], processes=[GpuProcess(pid=pid, used_bytes=6 << 30)]
        )
    ]
    moved = judge(watch, grown)["a"]
    assert judged == [{0: 4 << 30}, {0: 6 << 30}]
    assert moved.reason.startswith("holds 6.0 GiB on GPU 0 as placed")
    renamed = [msgspec.structs.replace(grown[0], uuid="GPU-1")]  # another GPU at index 0
    assert judge(watch, renamed)["a"].devices[0].uuid == "GPU-1" and len(judged) == 3


def test_past_the_shards_a_node_takes_the_rest_are_refused_in_sources(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(refused, "MAX_SHARDS", 3)
    pids = [sleeper(sleepers) for _ in range(5)]
    shards = tmp_path / "shards.toml"
    shards.write_text(
        "".join(
            f'[[shard]]\nid = "s{i}"\npid = {pid}\ngpus = [0]\n\n' for i, pid in enumerate(pids)
        )
    )
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)

    async def once() -> tuple[list[str], list[str]]:
        view = await watch.judge(gpu_listing(*pids), gpus_known=True)
        return [s.shard for s in view.statuses], [p.error or "" for p in view.problems]

    shown, problems = anyio.run(once, backend="asyncio")
    assert shown == ["s0", "s1", "s2"]
    assert problems == [
        "5 shards placed or found on this node, more than the 3 a node takes: the last 2 are "
        "not watched (docs/shards.md); spread them over more nodes"
    ]


def test_a_second_placement_of_a_held_process_is_refused_and_the_first_keeps_its_verdict(
    sleepers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pid = sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "first"\npid = {pid}\ngpus = [0]\n\n'
        f'[[shard]]\nid = "again"\npid = {pid}\ngpus = [1]\n'
    )
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)

    async def once() -> tuple[dict[str, ComputeStatus], list[str]]:
        view = await watch.judge(gpu_listing(pid), gpus_known=True)
        return {s.shard: s for s in view.statuses}, [p.error or "" for p in view.problems]

    said = (
        f"shards-file entry 'again' names process {pid}, which shards-file entry 'first' "
        "holds: one process is one shard, so it is refused and 'first' keeps it; remove one "
        "of the two placements"
    )
    for _ in range(3):
        statuses, problems = anyio.run(once, backend="asyncio")
        assert list(statuses) == ["again", "first"]
        again = statuses["again"]  # an answer on its own key: refused, and why
        assert (again.verdict, again.reason) == ("unknown", f"placement refused: {said}")
        first = statuses["first"]
        assert (first.verdict, [(d.index, d.used_bytes) for d in first.devices]) == (
            "gpu",
            [(0, 4 << 30)],
        )
        assert problems == [said]
    assert caplog.text.count(said) == 1  # logged once, said in sources every tick
    # The first placement goes: the second is judged on the process, which is its now.
    shards.write_text(f'[[shard]]\nid = "again"\npid = {pid}\ngpus = [1]\n')
    statuses, problems = anyio.run(once, backend="asyncio")
    assert (list(statuses), statuses["again"].verdict, problems) == (
        ["again"],
        "misplaced",
        [],
    )


def test_through_failed_reads_the_engines_word_keeps_the_devices_last_read(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 33/33 layers to GPU\n")
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\nlog_path = "{log}"\n')
    watch = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, logs=EngineLogs()
    )

    async def tick(known: bool) -> ComputeStatus:
        view = await watch.judge(gpu_listing(pid) if known else [], gpus_known=known)
        return view.statuses[0]

    async def ticks() -> list[ComputeStatus]:
        async with anyio.create_task_group() as tg:
            assert watch.logs is not None
            await tg.start(watch.logs.run)
            seen = [await tick(True), await tick(False), await tick(True), await tick(False)]
            tg.cancel_scope.cancel()
        return seen

    read, failed, again, failed_again = anyio.run(ticks, backend="asyncio")
    assert (read.verdict, read.backend, [d.index for d in read.devices]) == ("gpu", "CUDA", [0])
    # The tool fails: the engine's word still says gpu; the devices and backend the tool gave
    # stand, so the status is the same and no new one goes out for a failed read.
    for status in (failed, failed_again):
        assert (status.verdict, status.backend, status.devices) == ("gpu", "CUDA", read.devices)
        assert status.reason.startswith("llama.cpp says it offloaded all 33 layers")
    assert again.devices == read.devices


def test_a_shard_s_container_and_pod_are_read_once_from_its_cgroup(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_bytes(Path(f"/proc/{pid}/stat").read_bytes())
    cgroup = proc / str(pid) / "cgroup"
    cgroup.write_bytes((FIXTURES / "cgroup" / "containerd-v2-systemd-burstable.txt").read_bytes())
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "in-a-pod"\npid = {pid}\ngpus = [0]\n')
    watch = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, proc_root=proc
    )
    first = judge(watch, gpu_listing(pid))["in-a-pod"]
    assert first.verdict == "gpu"
    assert first.container_id == "3c19c840d9f9bacda62d2465be71c2d9e66c0e9819428e8a34c6049fa9998118"
    assert first.pod_uid == "e7f137f5-a11b-4c7d-b5a6-b47b57a73cab"

    # A running process's cgroup is not read again: the next tick does not open the file.
    cgroup.unlink()
    again = judge(watch, gpu_listing(pid))["in-a-pod"]
    assert (again.container_id, again.pod_uid) == (first.container_id, first.pod_uid)


def test_a_pod_s_namespace_pod_and_container_come_from_the_kubelet_s_log_link(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = sleeper(sleepers)
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_bytes(Path(f"/proc/{pid}/stat").read_bytes())
    (proc / str(pid) / "cgroup").write_bytes(
        (FIXTURES / "cgroup" / "containerd-v2-systemd-burstable.txt").read_bytes()
    )
    cid = "3c19c840d9f9bacda62d2465be71c2d9e66c0e9819428e8a34c6049fa9998118"
    logs = tmp_path / "containers"  # as the kubelet lays them out, and a neighbour's
    logs.mkdir()
    (logs / f"llama-8b-a-0_llm_llama-{cid}.log").touch()
    (logs / f"other-0_default_sidecar-{'f' * 64}.log").touch()
    monkeypatch.setattr(cgroup, "CONTAINER_LOGS", logs)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "in-a-pod"\npid = {pid}\ngpus = [0]\n')
    watch = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, proc_root=proc
    )
    status = judge(watch, gpu_listing(pid))["in-a-pod"]
    assert (status.pod_namespace, status.pod_name, status.container_name) == (
        "llm",
        "llama-8b-a-0",
        "llama",
    )
    assert status.container_id == cid


def test_a_shard_on_the_host_has_no_container_or_pod(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_bytes(Path(f"/proc/{pid}/stat").read_bytes())
    (proc / str(pid) / "cgroup").write_text("0::/system.slice/llama-server.service\n")
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "on-host"\npid = {pid}\ngpus = [0]\n')
    watch = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, proc_root=proc
    )
    status = judge(watch, gpu_listing(pid))["on-host"]
    assert (status.verdict, status.container_id, status.pod_uid) == ("gpu", None, None)


def two_gpus(pid: int, gpu1: GpuHealth, on_0: int | None = None) -> list[GpuSample]:
    """Two GPUs as the sampler hands them on (health judged): `pid` on GPU 1, `on_0` on
    GPU 0, which stays healthy."""
    return [
        health.assess(
            GpuSample(
                index=0,
                uuid="GPU-0",
                memory_used_bytes=2 << 30,
                processes=[GpuProcess(pid=on_0, used_bytes=2 << 30)] if on_0 else [],
                health=GpuHealth(xid_errors=0),
            )
        ),
        health.assess(
            GpuSample(
                index=1,
                uuid="GPU-1",
                memory_used_bytes=4 << 30,
                processes=[GpuProcess(pid=pid, used_bytes=4 << 30)],
                health=gpu1,
            )
        ),
    ]


# The GPU sources on this branch do not parse a health reading yet (their parsing is added
# elsewhere), so the GPUs are given as the sampler hands them on: GpuSample values judged by
# worker/gpu/health.py, as the sampler judges every GPU it reads.
def test_a_shard_on_a_gpu_turning_unhealthy_says_so_once_and_again_when_healthy(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    on_1, on_0 = sleeper(sleepers), sleeper(sleepers, "sleep 3601.5")
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "on-1"\npid = {on_1}\ngpus = [1]\n\n'
        f'[[shard]]\nid = "on-0"\npid = {on_0}\ngpus = [0]\n'
    )
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    tracker = EventTracker("n1", "s1")

    def tick(gpu1: GpuHealth) -> tuple[dict[str, ComputeStatus], list[str]]:
        statuses = judge(watch, two_gpus(on_1, gpu1, on_0))
        published = tracker.changes(list(statuses.values()))
        return statuses, [o.msg_id for o in published]

    healthy, first = tick(GpuHealth(xid_errors=0, ecc_uncorrected_volatile=0))
    assert healthy["on-1"].verdict == "gpu" and healthy["on-1"].unhealthy_gpus == []
    assert healthy["on-1"].reason == "holds 4.0 GiB on GPU 1 as placed"
    assert first == ["n1.on-0.s1.1", "n1.on-1.s1.1"]

    fallen = GpuHealth(xid_errors=1, last_xid=79, fatal_xid=79)
    sick, second = tick(fallen)
    status = sick["on-1"]
    assert status.verdict == "gpu"  # it still computes there, for now
    assert status.unhealthy_gpus == [1]
    assert status.reason == (
        "holds 4.0 GiB on GPU 1 as placed. GPU 1 is unhealthy: XID 79 (GPU has fallen off the "
        "bus): reset the GPU (nvidia-smi -r, with nothing running on it) or reboot the node"
    )
    assert second == ["n1.on-1.s1.2"]  # republished once; the shard on GPU 0 untouched
    assert sick["on-0"] == msgspec.structs.replace(healthy["on-0"], time=sick["on-0"].time)

    # Unchanged (another XID counted, the same GPU unhealthy): nothing new to publish.
    again, third = tick(msgspec.structs.replace(fallen, xid_errors=2))
    assert again["on-1"].unhealthy_gpus == [1] and third == []

    # Reset: healthy again, published once more.
    mended, fourth = tick(GpuHealth(xid_errors=0))
    assert mended["on-1"].unhealthy_gpus == [] and "unhealthy" not in mended["on-1"].reason
    assert fourth == ["n1.on-1.s1.3"]


def test_an_unhealthy_gpu_stays_named_through_failed_reads(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = sleeper(sleepers)
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [1]\n')
    watch = ShardPass("n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False)
    pending = GpuHealth(remapped_rows_pending=True)
    assert judge(watch, two_gpus(pid, pending))["a"].unhealthy_gpus == [1]

    async def failed_read() -> ComputeStatus:
        view = await watch.judge([], gpus_known=False)
        return view.statuses[0]

    stale = anyio.run(failed_read, backend="asyncio")
    assert stale.stale and stale.unhealthy_gpus == [1]
    assert stale.reason.endswith("GPU 1 is unhealthy: a row remapping is pending: reset the GPU "
                                 "(nvidia-smi -r, with nothing running on it) or reboot the node "
                                 "to apply it")  # fmt: skip


def test_a_status_says_where_its_shard_serves_as_a_gateway_reaches_it(
    sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    named, bound = sleeper(sleepers), sleeper(sleepers, "sleep 3601.75")
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "named"\npid = {named}\ngpus = [0]\n'
        'endpoint = { scheme = "https", host = "llm-a.internal", port = 8443, path_prefix = "/a" }\n'
        f'\n[[shard]]\nid = "bound"\npid = {bound}\ngpus = [0]\n'
        'health_url = "http://0.0.0.0:1/health"\n'  # port 1: nothing answers, it stays starting
    )
    watch = ShardPass(
        "n1",
        "s1",
        grace_s=0,
        shards_file=ShardsFile(shards),
        discovery=False,
        advertise_host="gpu7.internal",
    )
    statuses = judge(watch, gpu_listing(named, bound))
    urls = {s: e.url() for s, status in statuses.items() if (e := status.endpoint) is not None}
    assert urls == {"named": "https://llm-a.internal:8443/a", "bound": "http://gpu7.internal:1"}
    shards.write_text(f'[[shard]]\nid = "named"\npid = {named}\ngpus = [0]\n')
    after = judge(watch, gpu_listing(named))
    assert after["named"].endpoint is None
