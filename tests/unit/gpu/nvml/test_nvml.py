"""The NVML source: the same readings as nvidia-smi, no subprocess, never hung by the driver."""

from __future__ import annotations

import time
from typing import Any

import anyio
import msgspec
import pytest

from placewatch.schemas import GpuProcess, GpuSample
from placewatch.worker.gpu.nvidia_smi.query_csv import (
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)
from placewatch.worker.gpu.nvml import NvmlSource, ProcessLists, load, read_gpus

from tests.conftest import CORPUS, FIXTURES, needs_corpus
from tests.support.fake_nvml import FakeNvml, FakeNvmlLibrary, Mig, Process, captured

MiB = 1 << 20
OWN = FIXTURES / "nvidia-smi"


def sample(source: NvmlSource) -> Any:
    return anyio.run(source.sample, backend="asyncio")


def test_nvml_reads_the_same_values_as_nvidia_smi() -> None:
    gpus, status = sample(NvmlSource(FakeNvml(captured())))
    assert status.ok and status.name == "nvml" and status.vendor == "nvidia"
    assert [g.index for g in gpus] == [0, 1]
    busy, idle = gpus
    assert busy.uuid == "GPU-3f6c1a52-8e1b-4c2d-9a47-0b5d7e9f1a20"
    assert busy.bus_id == "00000000:07:00.0"
    assert busy.memory_used_bytes == 40960 * MiB
    assert busy.utilization_pct == 37 and busy.activity == "busy"
    assert busy.power_w == pytest.approx(212.34) and busy.power_cap_w == 400.0
    assert [(p.pid, p.used_bytes) for p in busy.processes] == [
        (4242, 38912 * MiB),
        (4317, 2048 * MiB),
    ]
    assert busy.mig_enabled is False and busy.mig == []
    # What NVML refuses (NotSupported) is None, and the rest of the GPU is kept.
    assert idle.utilization_pct is None and idle.activity is None
    assert idle.temperature_c is None and idle.power_w is None
    assert idle.memory_total_bytes == 81920 * MiB


def test_used_memory_leaves_out_the_drivers_reserve_as_nvidia_smi_does() -> None:
    # The capture: 81920 MiB in all, 40960 used, 40405 free; the driver keeps 555 for itself.
    # NVML's v1 reading counts those as used; an idle GPU of a larger reserve would read as
    # held by processes nobody lists, and a shard on the CPU beside it could not be judged.
    (busy, _), _ = sample(NvmlSource(FakeNvml(captured())))
    assert busy.memory_used_bytes == 40960 * MiB
    assert busy.memory_free_bytes == 40405 * MiB
    assert busy.memory_total_bytes == 81920 * MiB
    # A driver before R510 has only the v1 reading: the reserve counts as used.
    (old, _), _ = sample(NvmlSource(FakeNvml(captured(), v2=False)))
    assert old.memory_used_bytes == (40960 + 555) * MiB
    assert old.memory_free_bytes == 40405 * MiB
    # The reserve itself (DCGM_FI_DEV_FB_RESERVED): from v2, and none where only v1 answers.
    assert (busy.memory_reserved_bytes, old.memory_reserved_bytes) == (555 * MiB, None)


def test_memory_temperature_encoder_and_decoder_are_read_where_the_gpu_has_them() -> None:
    busy, idle = captured()
    told = msgspec.structs.replace(
        busy, memory_temperature_c=52.0, encoder_util_pct=12.0, decoder_util_pct=30.0
    )
    nvml = FakeNvml([told, idle])
    for _ in range(2):
        (busy_read, idle_read), status = sample(NvmlSource(nvml))
        assert status.ok
        assert (
            busy_read.memory_temperature_c,
            busy_read.encoder_util_pct,
            busy_read.decoder_util_pct,
        ) == (52.0, 12.0, 30.0)
        # A GPU without them (NOT_SUPPORTED): none, and the rest read.
        assert (idle_read.memory_temperature_c, idle_read.encoder_util_pct) == (None, None)
        assert idle_read.memory_total_bytes == 81920 * MiB


def test_nvidia_smi_reads_them_where_its_query_names_them() -> None:
    # The documented CSV format (`--format=csv,nounits`), with the three columns added.
    text = (
        "index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
        "temperature.memory, utilization.encoder [%], utilization.decoder [%]\n"
        "0, GPU-aa, 81920, 40960, 40405, 52, 12, 30\n"
        "1, GPU-bb, 81920, 0, 81365, [N/A], [N/A], [N/A]\n"
    )
    first, second = parse_gpus(text)
    assert (first.memory_temperature_c, first.encoder_util_pct, first.decoder_util_pct) == (
        52.0,
        12.0,
        30.0,
    )
    assert first.memory_reserved_bytes == 555 * MiB  # total less used and free
    assert (second.memory_temperature_c, second.encoder_util_pct) == (None, None)


def test_a_gpu_the_driver_lost_leaves_the_others_read() -> None:
    nvml = FakeNvml(captured())
    nvml.lost = {0}  # fallen off the bus: NVML refuses even its handle
    (lost, other), status = sample(NvmlSource(nvml))
    assert lost == GpuSample(index=0, vendor="nvidia")
    assert other.uuid == "GPU-9d2e4b61-27c3-4f0a-b8e5-6a1c3d5f7b92"
    assert other.memory_total_bytes == 81920 * MiB
    assert [p.pid for p in other.processes] == [5120]
    assert not status.ok and status.error is not None
    assert status.error.startswith("NVML cannot read GPU 0: GPU is lost; the other GPUs are read")


U64_MINUS_1 = (1 << 64) - 1
"""What a driver hands back as "no reading" where it raises no error."""


class SentinelNvml(FakeNvml):
    """GPU 0 answers every integer reading with a u64's -1, as a driver does for a reading
    it has not; GPU 1 answers as the capture says."""

    def _lie(self, h: Any, real: Any) -> Any:
        return U64_MINUS_1 if h.gpu.index == 0 else real

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int = 0) -> Any:
        memory = super().nvmlDeviceGetMemoryInfo(h, version)
        if h.gpu.index == 0:
            memory.free = U64_MINUS_1
        return memory

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return int(self._lie(h, super().nvmlDeviceGetPowerUsage(h)))

    def nvmlDeviceGetClockInfo(self, h: Any, type: int) -> int:
        return int(self._lie(h, super().nvmlDeviceGetClockInfo(h, type)))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return int(self._lie(h, super().nvmlDeviceGetTotalEnergyConsumption(h)))


@pytest.mark.parametrize("v2", [True, False])
def test_a_u64_sentinel_is_no_reading_never_16_eib_free(v2: bool) -> None:
    gpus = [msgspec.structs.replace(g, sm_clock_mhz=1980, energy_j=5.0e6) for g in captured()]
    (lying, honest), _ = sample(NvmlSource(SentinelNvml(gpus, v2=v2)))
    assert (lying.memory_total_bytes, lying.memory_used_bytes, lying.memory_free_bytes) == (
        None,
        None,
        None,
    )
    assert (lying.power_w, lying.sm_clock_mhz, lying.energy_j) == (None, None, None)
    assert lying.power_cap_w == 400.0  # what it did read is kept
    assert honest.memory_free_bytes is not None and honest.memory_free_bytes < 81920 * MiB
    assert (honest.sm_clock_mhz, honest.energy_j) == (1980, 5.0e6)
    msgspec.msgpack.encode(lying)  # fits MessagePack's and the consumers' 64-bit integers


def test_the_process_list_is_read_in_one_driver_call_where_the_bindings_allow() -> None:
    # 70 processes, more than the first read makes room for: it asks again with room for
    # them, and later reads ask once. What they give is what the bindings' own call gives.
    lists = ProcessLists()
    assert lists.slots == 64
    gpu = msgspec.structs.replace(
        captured()[0],
        processes=[GpuProcess(pid=1000 + n, used_bytes=n * MiB or None) for n in range(70)],
    )
    nvml = FakeNvmlLibrary([gpu])
    (first,), _ = read_gpus(nvml, lists)
    assert nvml.lists == 2
    assert lists.slots == 70 * 2 + 5
    (second,), _ = read_gpus(nvml, lists)
    assert nvml.lists == 3
    (through_bindings,), _ = read_gpus(FakeNvml([gpu]))
    assert first.processes == second.processes == through_bindings.processes == gpu.processes
    assert first.processes[0].used_bytes is None  # the driver's "not available"


def test_mig_gpu_reports_instances_and_their_processes() -> None:
    gpu = msgspec.structs.replace(captured()[0], utilization_pct=None)
    mig = [
        Mig(1, 0, "MIG-11111111-2222-3333-4444-555555555555", "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            40192 * MiB, 20000 * MiB, [Process(9001, 19000 * MiB)]),
        Mig(2, 0, "MIG-66666666-7777-8888-9999-000000000000", "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            40192 * MiB, 13 * MiB),
    ]  # fmt: skip
    (read,), _ = read_gpus(FakeNvml([gpu], {0: mig}))
    assert read.mig_enabled is True
    assert read.utilization_pct is None  # NVML cannot give it on a MIG GPU
    assert [(m.gpu_instance_id, m.compute_instance_id, m.profile) for m in read.mig] == [
        (1, 0, "3g.40gb"), (2, 0, "3g.40gb"),
    ]  # fmt: skip
    assert read.mig[0].uuid == "MIG-11111111-2222-3333-4444-555555555555"
    assert read.mig[0].memory_used_bytes == 20000 * MiB
    assert [(p.pid, p.used_bytes) for p in read.processes] == [(9001, 19000 * MiB)]


@needs_corpus
def test_nvml_replaying_the_h100_capture() -> None:
    here = CORPUS / "nvidia-smi-csv"
    gpus = parse_gpus(
        (here / "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv").read_text()
    )
    apps = parse_compute_apps(
        (
            here / "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-compute-apps-load.csv"
        ).read_text()
    )
    (gpu,), _ = read_gpus(FakeNvml(attach_processes(gpus, apps)))
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_total_bytes == 81559 * MiB
    assert gpu.power_w == pytest.approx(433.78)
    assert sorted(p.pid for p in gpu.processes) == [21180, 21181, 21198]


def test_a_hung_nvml_call_times_out_and_blocks_new_reads_until_it_returns() -> None:
    nvml = FakeNvml(captured())
    nvml.hang.set()
    source = NvmlSource(nvml, timeout_s=0.3)
    started = time.monotonic()
    gpus, status = sample(source)
    assert time.monotonic() - started < 2
    assert gpus == [] and not status.ok and status.degraded
    assert status.error == "NVML timed out after 0.3 s"
    calls = nvml.calls
    gpus, status = sample(source)  # the stuck read is still in its thread
    assert status.degraded and "has not returned" in (status.error or "")
    assert nvml.calls == calls, "a second read was started while the first hung"
    nvml.hang.clear()
    nvml.release.set()
    deadline = time.monotonic() + 5
    while source.thread.busy and time.monotonic() < deadline:
        time.sleep(0.05)
    gpus, status = sample(source)
    assert status.ok and len(gpus) == 2


def test_without_the_library_nvml_says_why() -> None:
    nvml, why = load()
    if nvml is not None:  # a machine with a real NVIDIA driver
        nvml.nvmlShutdown()
        pytest.skip("NVML is present here")
    assert why is not None
    assert why.startswith(("nvidia-ml-py is not installed", "NVML did not initialise"))
    assert NvmlSource().unavailable() == why
