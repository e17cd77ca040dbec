"""The xpu-smi source as the worker runs it: a fake xpu-smi on PATH replaying captures built
on intel/xpumanager's source (tests/fixtures/xpu-smi), through the real probe runner."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.worker.gpu.intel_sysfs import IntelSysfsSource
from placewatch.worker.gpu.registry import VendorChain
from placewatch.worker.gpu.xpu_smi import XpuSmiSource
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES, FakeGpuTools

OWN = FIXTURES / "xpu-smi"
GiB = 1 << 30


@pytest.fixture
def xpu(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.xpu_smi(OWN, "max1550", ids=(0, 1))
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def sample(source: XpuSmiSource) -> tuple[list[GpuSample], SourceStatus]:
    return anyio.run(source.sample, backend="asyncio")


def runs(xpu: FakeGpuTools) -> list[str]:
    return [c.split(" ", 1)[1] for c in xpu.calls("xpu-smi") if " child of " not in c]


def test_discovery_once_then_one_dump_a_tick(xpu: FakeGpuTools) -> None:
    source = XpuSmiSource(ProbeRunner(timeout_s=20))
    assert source.unavailable() is None
    gpus, status = sample(source)
    assert (status.name, status.vendor, status.ok, status.error) == ("xpu-smi", "intel", True, None)
    assert [(g.index, g.bus_id, g.memory_total_bytes) for g in gpus] == [
        (0, "0000:29:00.0", 128 * GiB),
        (1, "0000:3a:00.0", 128 * GiB),
    ]
    assert (gpus[0].utilization_pct, gpus[0].driver_version) == (
        99.55,
        "I915_23.10.32_PSB_230816.32",
    )
    sample(source)
    dump = "dump -d 0,1 -m 0,1,2,3,4,8,17,18 -i 1 -n 1"
    assert runs(xpu) == ["discovery -j", "discovery -d 0 -j", "discovery -d 1 -j", dump, dump]


def test_a_2_0_xpu_smi_that_refuses_m_is_asked_with_metrics(xpu: FakeGpuTools) -> None:
    xpu.xpu_smi(OWN, "flex170")
    (xpu.data / "xpu-smi" / "refuse-m").write_text("")
    source = XpuSmiSource(ProbeRunner(timeout_s=20))
    (gpu,), status = sample(source)
    assert status.ok, status.error
    assert (gpu.name, gpu.utilization_pct, gpu.memory_total_bytes) == (
        "Intel(R) Data Center GPU Flex 170",
        37.0,
        16 * GiB,
    )
    sample(source)
    dumps = [r for r in runs(xpu) if r.startswith("dump")]
    assert dumps == [
        "dump -d 0 -m 0,1,2,3,4,8,17,18 -i 1 -n 1",
        "dump -d 0 --metrics 0,1,2,3,4,8,17,18 --interval 1 --number 1",
        "dump -d 0 --metrics 0,1,2,3,4,8,17,18 --interval 1 --number 1",  # the form kept
    ]


def test_level_zero_failing_is_an_error_saying_what_to_check(xpu: FakeGpuTools) -> None:
    xpu.write("xpu-smi", "discovery.json", OWN / "level-zero-error.json")
    gpus, status = sample(XpuSmiSource(ProbeRunner(timeout_s=20)))
    assert (gpus, status.ok, status.degraded) == ([], False, False)
    assert (status.error or "").startswith(
        "xpu-smi listed no GPU (Level Zero Initialization Error)"
    )
    assert "lsmod | grep -e i915 -e xe" in (status.error or "")


def test_a_device_the_dump_drops_is_looked_for_again(xpu: FakeGpuTools) -> None:
    source = XpuSmiSource(ProbeRunner(timeout_s=20))
    sample(source)
    text = (OWN / "max1550-dump.csv").read_text().splitlines()
    xpu.write("xpu-smi", "dump.csv", "\n".join(text[:2]) + "\n")  # device 1 fell off the bus
    gpus, status = sample(source)
    assert ([g.index for g in gpus], status.ok) == ([0], True)
    sample(source)
    assert runs(xpu).count("discovery -j") == 2  # properties are not asked again


def test_a_hung_xpu_smi_is_degraded(xpu: FakeGpuTools) -> None:
    xpu.hang("xpu-smi")
    # SIGTERM stands in for SIGKILL: the fake ignores it, as a tool stuck in the driver.
    runner = ProbeRunner(timeout_s=0.5, kill_signal=signal.SIGTERM)
    gpus, status = sample(XpuSmiSource(runner))
    assert (gpus, status.ok, status.degraded) == ([], False, True)
    assert "timed out" in (status.error or "")
    stuck = runner.stuck("xpu-smi")
    assert stuck is not None
    os.killpg(stuck, signal.SIGKILL)


def test_the_intel_chain_falls_back_to_sysfs_when_xpu_smi_fails(xpu: FakeGpuTools) -> None:
    (xpu.data / "xpu-smi" / "fail").write_text("1 Error: Level Zero Initialization Error")
    sysfs = IntelSysfsSource(FIXTURES / "intel-sysfs" / "b580-xe")
    chain = VendorChain("intel", [XpuSmiSource(ProbeRunner(timeout_s=20)), sysfs])
    gpus, statuses = anyio.run(chain.sample, backend="asyncio")
    assert [(g.name, g.memory_total_bytes) for g in gpus] == [
        ("Intel GPU 8086:e20b (xe)", 12 * GiB)
    ]
    assert [(s.name, s.ok) for s in statuses] == [("xpu-smi", False), ("intel-sysfs", True)]
    assert chain.current is sysfs
