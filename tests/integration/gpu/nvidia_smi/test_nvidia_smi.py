"""The nvidia-smi source as the worker runs it: CSV queries, the XML where CSV is refused, MIG."""

from __future__ import annotations

import anyio
import pytest

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.worker.gpu.nvidia_smi import NvidiaSmiSource
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES, FakeGpuTools

MiB = 1 << 20
OWN = FIXTURES / "nvidia-smi"


@pytest.fixture
def smi(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.install("nvidia-smi")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def sample(source: NvidiaSmiSource) -> tuple[list[GpuSample], SourceStatus]:
    return anyio.run(source.sample, backend="asyncio")


def test_a_driver_that_refuses_the_csv_query_is_read_through_its_xml(smi: FakeGpuTools) -> None:
    smi.write("nvidia-smi", "refuse-csv", "")
    smi.write("nvidia-smi", "q.xml", OWN / "l4x2-q.xml")
    source = NvidiaSmiSource(ProbeRunner())
    gpus, status = sample(source)
    assert status.ok, status.error
    assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA L4"), (1, "NVIDIA L4")]
    assert [p.pid for p in gpus[0].processes] == [4242, 4317]
    sample(source)
    calls = [c.split(" ", 1)[1] for c in smi.calls("nvidia-smi")]
    assert calls[0].startswith("--query-gpu=")
    assert calls[1:] == ["-q -x", "-q -x"], "the CSV query was tried again"


def test_health_readings_reach_the_sample_from_the_csv_query(smi: FakeGpuTools) -> None:
    smi.nvidia_smi(OWN / "a100x2-query-gpu-health.csv")
    gpus, status = sample(NvidiaSmiSource(ProbeRunner()))
    assert status.ok, status.error
    assert [g.sm_clock_mhz for g in gpus] == [1410, 210]
    assert [g.health.ecc_uncorrected_volatile if g.health else None for g in gpus] == [0, 2]
    assert gpus[1].health is not None
    assert gpus[1].health.clock_events == ["gpu_idle", "hw_thermal_slowdown"]


def test_a_driver_without_a_health_field_is_read_through_its_xml(smi: FakeGpuTools) -> None:
    smi.write("nvidia-smi", "unknown-fields", "clocks_throttle_reasons.active\n")
    smi.write("nvidia-smi", "query-gpu.csv", OWN / "a100x2-query-gpu-health.csv")
    smi.write("nvidia-smi", "q.xml", OWN / "h200-q.xml")
    (gpu,), status = sample(NvidiaSmiSource(ProbeRunner()))
    assert status.ok, status.error
    assert gpu.name == "NVIDIA H200"
    assert gpu.health is not None
    assert (gpu.health.remapped_rows_pending, gpu.health.pcie_replays) == (False, 3)


def test_a_mig_gpu_gets_its_instances_from_the_xml(smi: FakeGpuTools) -> None:
    smi.write("nvidia-smi", "query-gpu.csv", OWN / "h100-mig-query-gpu.csv")
    smi.write("nvidia-smi", "query-compute-apps.csv", OWN / "h100-mig-query-compute-apps.csv")
    smi.write("nvidia-smi", "q.xml", OWN / "h100-mig-q.xml")
    (gpu,), status = sample(NvidiaSmiSource(ProbeRunner()))
    assert status.ok
    assert gpu.mig_enabled is True
    assert gpu.utilization_pct is None
    assert [(m.gpu_instance_id, m.compute_instance_id) for m in gpu.mig] == [(1, 0), (2, 0)]
    assert gpu.mig[0].memory_used_bytes == 20311 * MiB
    assert [(p.pid, p.used_bytes) for p in gpu.processes] == [(31337, 20280 * MiB)]


def test_no_xml_is_read_without_mig(smi: FakeGpuTools) -> None:
    smi.write("nvidia-smi", "query-gpu.csv", OWN / "a100x2-query-gpu.csv")
    smi.write("nvidia-smi", "query-compute-apps.csv", OWN / "a100x2-query-compute-apps.csv")
    gpus, status = sample(NvidiaSmiSource(ProbeRunner()))
    assert status.ok and len(gpus) == 2
    assert not any("-q -x" in c for c in smi.calls("nvidia-smi"))


def test_a_gpu_the_tool_cannot_reach_leaves_the_others_read(smi: FakeGpuTools) -> None:
    # nvidia-smi prints a message where the row of a GPU it cannot reach would be, the
    # rows of the others, and fails.
    header, _, gpu1 = (OWN / "a100x2-query-gpu.csv").read_text().splitlines()
    lost = "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"
    smi.write("nvidia-smi", "query-gpu.csv", f"{header}\n{lost}\n{gpu1}\n")
    smi.write("nvidia-smi", "query-compute-apps.csv", OWN / "a100x2-query-compute-apps.csv")
    smi.write("nvidia-smi", "exit", f"15 {lost}")
    gpus, status = sample(NvidiaSmiSource(ProbeRunner()))
    assert [(g.index, g.uuid) for g in gpus] == [(1, "GPU-9d2e4b61-27c3-4f0a-b8e5-6a1c3d5f7b92")]
    assert [p.pid for p in gpus[0].processes] == [5120]
    assert not status.ok
    assert status.error == (
        f"nvidia-smi exited 15: {lost}; the GPUs it printed are read; "
        f"nvidia-smi exited 15: {lost}; the processes it printed are read"
    )
