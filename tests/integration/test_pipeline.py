"""The sampling pipeline made from the settings: read through the fake nvidia-smi, judge the
shards of a shards file (real processes), build the telemetry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from placewatch.worker.config import Settings, load
from placewatch.worker.pipeline import Pipeline, Tick, open_pipeline

from tests.conftest import FIXTURES, GPU0, NO_PROCESSES, FakeGpuTools, apps, start
from tests.support.drm_proc import RENDER, add_process, fdinfo
from tests.support.eventually import eventually

MiB = 1 << 20
Procs = dict[str, subprocess.Popen[bytes]]


@pytest.fixture
def smi(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    """The fake nvidia-smi on PATH, answering the two A100s of the project's capture."""
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def settings(tmp_path: Path, shards: str, **given: Any) -> Settings:
    path = tmp_path / "shards.toml"
    path.write_text(shards)
    flags = {
        "node": "n1",
        "interval": 1.0,
        "gpu_sources": ["nvidia-smi"],
        "shards": str(path),
        "grace": 0.0,
        "discover": False,
        "fdinfo_root": NO_PROCESSES,
    }
    return load(flags | given, environ={})


def takes(settings: Settings, count: int, session: str | None = "s1") -> list[Tick]:
    async def main() -> list[Tick]:
        async with open_pipeline(settings, session) as pipeline:
            return [await pipeline.take() for _ in range(count)]

    return anyio.run(main, backend="asyncio")


def test_each_take_reads_judges_and_builds_the_next_telemetry(
    smi: FakeGpuTools, shard_procs: Procs, tmp_path: Path
) -> None:
    pid = start(shard_procs, "a")
    smi.write("nvidia-smi", "query-compute-apps.csv", apps({pid: (GPU0, 2048)}))
    first, second = takes(settings(tmp_path, f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n'), 2)
    assert [t.sample.seq for t in (first, second)] == [0, 1]
    telemetry = first.sample
    assert (telemetry.node, telemetry.session, telemetry.interval_s) == ("n1", "s1", 1.0)
    assert second.sample.session == "s1"
    assert [(s.name, s.ok, s.vendor) for s in telemetry.sources] == [("nvidia-smi", True, "nvidia")]
    assert [g.index for g in telemetry.gpus] == [0, 1]
    assert [(p.pid, p.used_bytes, p.shard) for p in telemetry.gpus[0].processes] == [
        (pid, 2048 * MiB, "a")
    ]
    assert [(b.shard, b.verdict, b.pid) for b in telemetry.shards] == [("a", "gpu", pid)]
    (status,) = first.shards.statuses
    assert (status.shard, status.verdict, status.placed_gpus) == ("a", "gpu", [0])
    assert telemetry.host is not None and telemetry.host.cpu_count is not None


def test_an_engine_log_is_followed_for_the_verdict(
    smi: FakeGpuTools, shard_procs: Procs, tmp_path: Path
) -> None:
    pid = start(shard_procs, "b")
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")
    shards = f'[[shard]]\nid = "b"\npid = {pid}\ngpus = [1]\nlog_path = "{log}"\n'
    (tick,) = takes(settings(tmp_path, shards), 1)
    (status,) = tick.shards.statuses
    assert (status.verdict, status.layers_offloaded, status.layers_total) == ("cpu_fallback", 0, 33)
    assert [b.verdict for b in tick.sample.shards] == ["cpu_fallback"]


def test_without_a_gpu_tool_the_source_says_so_and_no_shard_is_judged(
    fake_gpu: FakeGpuTools, shard_procs: Procs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(fake_gpu.bin))  # an empty bin/: no nvidia-smi
    pid = start(shard_procs, "a")
    (tick,) = takes(settings(tmp_path, f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n'), 1)
    assert tick.sample.gpus == []
    assert [(s.name, s.ok, s.error) for s in tick.sample.sources] == [
        ("nvidia-smi", False, "nvidia-smi not found on PATH")
    ]
    assert [(b.shard, b.verdict) for b in tick.sample.shards] == [("a", "unknown")]


def test_a_bad_shards_file_entry_is_listed_with_the_sources_and_answered_on_its_key(
    smi: FakeGpuTools, tmp_path: Path
) -> None:
    (tick,) = takes(settings(tmp_path, '[[shard]]\nid = "x"\ncolour = "red"\n'), 1)
    names = [(s.name, s.ok) for s in tick.sample.sources]
    assert names == [("nvidia-smi", True), ("shards-file", False)]
    problem = tick.sample.sources[1].error
    assert problem is not None
    assert "shard #1: unknown key 'colour'" in problem
    (status,) = tick.shards.statuses
    assert (status.shard, status.verdict) == ("x", "unknown")
    assert status.reason == f"placement refused: {problem}"


def test_a_pipeline_without_a_session_makes_its_own(tmp_path: Path) -> None:
    given = settings(tmp_path, "")
    one, other = Pipeline.from_settings(given), Pipeline.from_settings(given)
    assert len(one.session) == 12 and int(one.session, 16) >= 0
    assert one.session != other.session
    assert one.shards.session == one.session
    assert Pipeline.from_settings(given, session="mine").session == "mine"
    assert one.logs is not None


def test_the_settings_choose_the_sources_and_the_interval(tmp_path: Path) -> None:
    pipeline = Pipeline.from_settings(
        settings(tmp_path, "", gpu_sources=["amd-smi", "nvml"], interval=5.0)
    )
    chains = pipeline.sampler.chains
    assert [(c.vendor, [s.name for s in c.candidates]) for c in chains] == [
        ("nvidia", ["nvml"]),
        ("amd", ["amd-smi"]),
    ]
    assert (pipeline.node, pipeline.interval_s, pipeline.seq) == ("n1", 5.0, 0)


def test_an_intel_node_is_read_from_its_drivers_sysfs_into_telemetry(tmp_path: Path) -> None:
    drm = FIXTURES / "intel-sysfs" / "b580-xe"
    first, second = takes(
        settings(tmp_path, "", gpu_sources=["xpu-smi", "intel-sysfs"], drm_root=str(drm)), 2
    )
    assert [(s.name, s.ok, s.vendor) for s in first.sample.sources] == [
        ("intel-sysfs", True, "intel")
    ]
    (gpu,) = first.sample.gpus
    assert (gpu.vendor, gpu.index, gpu.bus_id, gpu.power_w) == ("intel", 0, "0000:03:00.0", None)
    assert (gpu.power_cap_w, gpu.temperature_c, gpu.sm_clock_mhz) == (190.0, 54.0, 2850)
    assert second.sample.gpus[0].power_w == 0.0  # the energy counter's rise: none in a fixture


WITH_CHILD = """import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open({told!r} + ".tmp", "w").write(str(child.pid))
__import__("os").rename({told!r} + ".tmp", {told!r})
time.sleep(600)
"""


def test_a_shards_processes_on_an_intel_gpu_are_read_from_fdinfo_into_status(
    shard_procs: Procs, tmp_path: Path
) -> None:
    """The B580's sysfs; the shard's real process and its real child holding one xe client
    (the child through an inherited descriptor), and a foreign process another, in a /proc
    in a folder: the client counts once, the shard holds the GPU, and busy time is read."""
    told = tmp_path / "child.pid"
    pid = start(shard_procs, "a", WITH_CHILD.format(told=str(told)))
    eventually(told.exists, what="the shard's child started")
    child = int(told.read_text())
    proc = tmp_path / "proc"
    add_process(proc, pid, {3: (RENDER, fdinfo("xe-dgpu.txt"))})
    add_process(proc, 999_999, {5: (RENDER, fdinfo("xe-dgpu.txt", client_id="9"))})
    given = settings(
        tmp_path,
        f'[[shard]]\nid = "a"\npid = {pid}\ngpus = [0]\n',
        gpu_sources=["intel-sysfs"],
        drm_root=str(FIXTURES / "intel-sysfs" / "b580-xe"),
        fdinfo_root=str(proc),
    )
    add_process(proc, child, {3: (RENDER, fdinfo("xe-dgpu.txt"))})

    async def main() -> list[Tick]:
        async with open_pipeline(given, "s1") as pipeline:
            first = await pipeline.take()
            text = fdinfo("xe-dgpu.txt", cycles_ccs="600000000", total_cycles_ccs="8655183225")
            (proc / str(pid) / "fdinfo" / "3").write_text(text)
            return [first, await pipeline.take()]

    first, second = anyio.run(main, backend="asyncio")
    (gpu,) = first.sample.gpus
    assert (gpu.vendor, gpu.bus_id) == ("intel", "0000:03:00.0")
    assert [(p.pid, p.used_bytes, p.shard) for p in gpu.processes] == [
        (pid, 23992 * 1024, "a"),
        (999_999, 23992 * 1024, None),
    ]
    assert gpu.foreign_bytes is None  # sysfs reads no memory in use on the card
    (status,) = first.shards.statuses
    assert (status.shard, status.verdict, status.placed_gpus) == ("a", "gpu", [0])
    # ccs: 600M of 1000M cycles, over its 4 engines
    (process, _) = second.sample.gpus[0].processes
    assert (process.pid, process.sm_pct) == (pid, 15)
