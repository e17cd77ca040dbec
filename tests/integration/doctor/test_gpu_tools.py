"""The GPU tools check: each source on the node sampled once, through a fake nvidia-smi."""

from __future__ import annotations

import re

import anyio
import pytest

from placewatch.worker.config import Settings
from placewatch.worker.doctor.gpu_tools import check_gpu_tools
from placewatch.worker.doctor.report import Report

from tests.conftest import (
    FIXTURES,
    GPU0,
    GPU1,
    FakeGpuTools,
    apps,
    free_port,
    real_nvml,
    run_placewatch,
)
from tests.support.doctor import A100_GPUS, lines


def checked(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch, probe_timeout: float = 5.0
) -> tuple[list[str], list[int]]:
    """The report's lines and the GPUs' indices of one check through nvidia-smi alone."""
    for name, value in fake_gpu.env().items():
        monkeypatch.setenv(name, value)
    said: list[str] = []
    settings = Settings(gpu_sources=["nvidia-smi"], probe_timeout=probe_timeout)
    gpus = anyio.run(check_gpu_tools, settings, Report(said.append))
    return said, [g.index for g in gpus]


def test_nvidia_smi_answering_is_ok_with_its_gpus_by_model_and_their_processes(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS, apps({4242: (GPU0, 2048), 4343: (GPU1, 1024)}))
    said, indices = checked(fake_gpu, monkeypatch)
    assert indices == [0, 1]
    (line,) = said
    assert re.fullmatch(
        r"ok    GPU tool nvidia-smi: 2 GPUs \(2x NVIDIA A100-SXM4-80GB\), 2 processes, in \d+ ms",
        line,
    ), line


def test_an_unhealthy_gpu_fails_naming_its_problems_and_what_to_do(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu-health.csv")
    said, indices = checked(fake_gpu, monkeypatch)
    assert indices == [0, 1]
    tool, sick = said
    assert tool.startswith("ok    GPU tool nvidia-smi: 2 GPUs"), tool
    assert sick == (
        "fail  nvidia GPU 1: unhealthy: 2 uncorrected ECC error(s) since the last reset: reset "
        "the GPU (nvidia-smi -r, with nothing running on it) or reboot the node; next: move its "
        "shards off it first; a gateway placing through FleetView.gpus_for offers it no more"
    )


def test_a_hung_nvidia_smi_fails_with_what_to_check_in_the_driver(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS)
    fake_gpu.hang("nvidia-smi")
    said, indices = checked(fake_gpu, monkeypatch, probe_timeout=0.5)
    assert indices == []
    (line,) = said
    assert line.startswith("fail  GPU tool nvidia-smi: nvidia-smi timed out after 0.5 s"), line
    assert line.endswith(
        "; next: check that the NVIDIA driver is loaded (lsmod | grep nvidia; "
        "dmesg | grep -i -e NVRM -e Xid)"
    )


def test_a_node_without_gpu_tools_fails_with_what_to_install(fake_gpu: FakeGpuTools) -> None:
    if real_nvml():
        pytest.skip("a real NVML answers on this machine")
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", env=fake_gpu.env())
    assert done.returncode == 1
    (nvml_line,) = lines(done.stdout, "GPU tool nvml")
    assert nvml_line.startswith("skip  GPU tool nvml: NVML did not initialise: ")
    assert lines(done.stdout, "GPU tool nvidia-smi") == [
        "skip  GPU tool nvidia-smi: nvidia-smi not found on PATH"
    ]
    assert lines(done.stdout, "GPU tool xpu-smi") == [
        "skip  GPU tool xpu-smi: xpu-smi not found on PATH: for utilization and memory in use of "
        "Intel data-center GPUs (Max, Flex), install intel/xpumanager's xpu-smi package; every "
        "Intel GPU is read from sysfs (intel-sysfs) without it"
    ]
    assert lines(done.stdout, "GPU tools") == [
        "fail  GPU tools: none found: no NVML, nvidia-smi, rocm-smi, amd-smi, xpu-smi or Intel "
        "GPU in sysfs (i915, xe); next: install the NVIDIA driver (NVML, and nvidia-smi on the "
        "worker's PATH), or ROCm's rocm-smi or amd-smi on the worker's PATH; Intel GPUs are read "
        "from sysfs once the i915 or xe driver is loaded, and data-center ones (Max, Flex) through "
        "xpu-smi (intel/xpumanager's xpu-smi package) on the worker's PATH"
    ]
    env = fake_gpu.env() | {"PLACEWATCH_GPU_SOURCES": "rocm-smi"}
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", env=env)
    assert [line for line in done.stdout.splitlines() if "GPU tool" in line] == [
        "skip  GPU tool rocm-smi: rocm-smi not found on PATH",
        "fail  GPU tools: none found: no rocm-smi; next: install the NVIDIA driver (NVML, and "
        "nvidia-smi on the worker's PATH), or ROCm's rocm-smi or amd-smi on the worker's PATH; "
        "Intel GPUs are read from sysfs once the i915 or xe driver is loaded, and data-center "
        "ones (Max, Flex) through xpu-smi (intel/xpumanager's xpu-smi package) on the worker's "
        "PATH; or widen gpu_sources (now rocm-smi)",
    ]


def test_an_intel_node_without_xpu_smi_is_read_from_sysfs_saying_what_xpu_smi_adds(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in fake_gpu.env().items():
        monkeypatch.setenv(name, value)
    said: list[str] = []
    settings = Settings(
        gpu_sources=["xpu-smi", "intel-sysfs"], drm_root=str(FIXTURES / "intel-sysfs" / "b580-xe")
    )
    gpus = anyio.run(check_gpu_tools, settings, Report(said.append))
    assert [(g.vendor, g.index) for g in gpus] == [("intel", 0)]
    skipped, read = said
    assert skipped.startswith("skip  GPU tool xpu-smi: xpu-smi not found on PATH: for utilization")
    assert re.fullmatch(
        r"ok    GPU tool intel-sysfs: 1 GPU \(Intel GPU 8086:e20b \(xe\)\), 0 processes, in \d+ ms",
        read,
    ), read


def test_a_failing_xpu_smi_fails_with_what_to_check_in_the_intel_driver(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu.install("xpu-smi")
    fake_gpu.write("xpu-smi", "discovery.json", FIXTURES / "xpu-smi" / "level-zero-error.json")
    for name, value in fake_gpu.env().items():
        monkeypatch.setenv(name, value)
    said: list[str] = []
    anyio.run(check_gpu_tools, Settings(gpu_sources=["xpu-smi"]), Report(said.append))
    (line,) = said
    assert line.startswith("fail  GPU tool xpu-smi: xpu-smi listed no GPU (Level Zero"), line
    assert line.endswith(
        "; next: check that the i915 or xe driver is loaded (lsmod | grep -e i915 -e xe; "
        "dmesg | grep -i -e i915 -e xe) and that this user may open /dev/dri (the render and "
        "video groups)"
    )
