"""Per-process activity as the sources read it through their tools: `nvidia-smi pmon` and
`amd-smi process`, each run only when a shard needs it and a GPU lists processes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.worker.gpu import ActivityWanted
from placewatch.worker.gpu.amd_smi import AmdSmiSource
from placewatch.worker.gpu.nvidia_smi import NvidiaSmiSource
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES, FakeGpuTools
from tests.integration.gpu.amd_smi.test_amd_smi import calls, fake_amd_smi
from tests.support.kfd_tree import make_kfd_tree

NVIDIA = FIXTURES / "nvidia-smi"
AMD = FIXTURES / "amd-smi"


@pytest.fixture
def smi(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.nvidia_smi(NVIDIA / "a100x2-query-gpu.csv", NVIDIA / "a100x2-query-compute-apps.csv")
    fake_gpu.write("nvidia-smi", "pmon.txt", NVIDIA / "a100x2-pmon.txt")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def sample(
    source: NvidiaSmiSource | AmdSmiSource, activity: ActivityWanted
) -> tuple[list[GpuSample], SourceStatus]:
    async def once() -> tuple[list[GpuSample], SourceStatus]:
        return await source.sample(activity)

    return anyio.run(once, backend="asyncio")


def pmon_runs(smi: FakeGpuTools) -> int:
    return sum(1 for c in smi.calls("nvidia-smi") if c.split(" ", 1)[1].startswith("pmon"))


def test_pmon_runs_only_when_asked(smi: FakeGpuTools) -> None:
    source = NvidiaSmiSource(ProbeRunner())
    gpus, status = sample(source, activity="no")
    assert status.ok and pmon_runs(smi) == 0
    assert {p.sm_pct for g in gpus for p in g.processes} == {None}
    gpus, status = sample(source, activity="any")
    assert status.ok and pmon_runs(smi) == 1
    assert [c.split(" ", 1)[1] for c in smi.calls("nvidia-smi")][-1] == "pmon -c 1 -s u"
    by_pid = {p.pid: (p.sm_pct, p.mem_pct) for g in gpus for p in g.processes}
    assert by_pid == {4242: (35.0, 12.0), 4317: (None, None), 5120: (None, None)}


def test_pmon_is_not_run_when_no_gpu_lists_a_process(smi: FakeGpuTools) -> None:
    smi.nvidia_smi(NVIDIA / "a100x2-query-gpu.csv")  # no compute apps
    gpus, status = sample(NvidiaSmiSource(ProbeRunner()), activity="any")
    assert status.ok and len(gpus) == 2 and pmon_runs(smi) == 0


def test_an_idle_gpus_processes_read_zero(smi: FakeGpuTools) -> None:
    smi.nvidia_smi(NVIDIA / "h200-query-gpu.csv", NVIDIA / "h200-query-compute-apps.csv")
    smi.write("nvidia-smi", "pmon.txt", NVIDIA / "h200-pmon.txt")
    (gpu,), status = sample(NvidiaSmiSource(ProbeRunner()), activity="any")
    assert status.ok
    assert [(p.pid, p.sm_pct) for p in gpu.processes] == [(492, 0.0), (488, 0.0)]


def test_a_failing_pmon_leaves_the_readings_and_no_activity(smi: FakeGpuTools) -> None:
    (smi.data / "nvidia-smi" / "pmon.txt").unlink()  # the stand-in then fails: exit 6
    gpus, status = sample(NvidiaSmiSource(ProbeRunner()), activity="any")
    assert status.ok and len(gpus) == 2
    assert [p.pid for p in gpus[0].processes] == [4242, 4317]
    assert {p.sm_pct for g in gpus for p in g.processes} == {None}


def later(text: str, gfx_ns: int) -> str:
    """The process listing with llama-server's gfx counter moved on (constructed)."""
    return text.replace('"value": 1532177', f'"value": {gfx_ns}')


def test_amd_smi_process_runs_beside_the_kfd_tree_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = (AMD / "mi300x-process.json").read_text()
    bin_dir = fake_amd_smi(tmp_path, AMD / "mi300x-metric.json", listing)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    # metric prints no bus ids: KFD's GPUs are matched in PCI order (41416 is GPU 0).
    kfd_root = make_kfd_tree(
        tmp_path / "kfd", {2: (41416, 0x0C00), 3: (14446, 0x2200)}, {4242: {41416: 96 << 30}}
    )
    source = AmdSmiSource(ProbeRunner(), kfd_root=kfd_root)
    gpus, status = sample(source, activity="no")
    assert status.ok and not any(c.startswith("process") for c in calls(tmp_path))
    gpus, _ = sample(source, activity="any")  # the first read of the counter: no share yet
    assert [c for c in calls(tmp_path) if c.startswith("process")] == ["process --json"]
    assert [(p.pid, p.sm_pct) for p in gpus[0].processes] == [(4242, None)]
    (tmp_path / "process.json").write_text(later(listing, 1532177 + 10**12))  # 1000 s: all
    gpus, _ = sample(source, activity="any")
    assert [(p.pid, p.sm_pct) for p in gpus[0].processes] == [(4242, 100.0)]


def test_without_a_kfd_tree_the_one_process_listing_gives_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = (AMD / "mi300x-process.json").read_text()
    bin_dir = fake_amd_smi(tmp_path, AMD / "mi300x-metric.json", listing)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = AmdSmiSource(ProbeRunner(), kfd_root=tmp_path / "no-kfd")
    sample(source, activity="any")
    (tmp_path / "process.json").write_text(later(listing, 1532177))  # nothing ran since
    gpus, status = sample(source, activity="any")
    assert status.ok
    assert [c for c in calls(tmp_path) if c.startswith("process")] == ["process --json"] * 2
    # amd-smi's zero is no reading on AMD: ROCm compute never shows in that counter.
    assert [(p.pid, p.sm_pct) for p in gpus[0].processes] == [(4242, None)]
