"""A vendor's chain with NVML and the fake nvidia-smi: the preferred source kept while it
works, the next one run in the same tick when it fails."""

from __future__ import annotations

import anyio
import pytest

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.worker.gpu.nvidia_smi import NvidiaSmiSource
from placewatch.worker.gpu.nvml import NvmlSource
from placewatch.worker.gpu.registry import VendorChain
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES, FakeGpuTools
from tests.support.fake_nvml import FakeNvml, captured

Result = tuple[list[GpuSample], list[SourceStatus]]


def sample(chain: VendorChain) -> Result:
    return anyio.run(chain.sample, backend="asyncio")


@pytest.fixture
def smi(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def test_nvml_is_preferred_and_nvidia_smi_never_spawned(smi: FakeGpuTools) -> None:
    chain = VendorChain(
        "nvidia", [NvmlSource(FakeNvml(captured())), NvidiaSmiSource(ProbeRunner())]
    )
    for _ in range(3):
        gpus, statuses = sample(chain)
        assert len(gpus) == 2
        assert [s.name for s in statuses] == ["nvml"]
    assert smi.calls("nvidia-smi") == []


def test_a_failing_source_falls_back_in_the_same_tick_and_sticks(smi: FakeGpuTools) -> None:
    nvml = FakeNvml(captured())
    chain = VendorChain("nvidia", [NvmlSource(nvml), NvidiaSmiSource(ProbeRunner())])
    sample(chain)
    nvml.failing = True
    gpus, statuses = sample(chain)
    assert len(gpus) == 2, "the tick lost its sample"
    assert [(s.name, s.ok) for s in statuses] == [("nvml", False), ("nvidia-smi", True)]
    assert statuses[0].error == "NVML failed: Unknown Error"
    calls = nvml.calls
    gpus, statuses = sample(chain)
    assert [s.name for s in statuses] == ["nvidia-smi"]
    assert nvml.calls == calls, "NVML was probed again on a tick where nvidia-smi works"
