"""How often the NVML source asks each reading: once, slowly, or every tick.

Counted through the stand-in library under the real nvidia-ml-py (bench/nvml_library.py,
answering from the project's H200 and A100 captures): each C call the driver would get.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

from bench.nvml_calls import GPUS, GPUSTAT_OFFERED, Clock, node, placewatch_ticks
from bench.nvml_library import loaded
from placewatch.schemas import GpuHealth, GpuSample
from placewatch.worker.gpu.nvml import NvmlSource, read_gpus
from placewatch.worker.gpu.nvml.cadence import SLOW_EVERY_S, Cadence
from placewatch.worker.gpu.nvml.processes import ProcessUtilization

from tests.support.fake_nvml import FakeNvml, Mig, UtilizationSample, captured, h200

STEADY_PER_GPU = 13.25
"""The calls a steady tick makes per GPU (8 H200s, 8 processes each, activity read)."""
FIXED = ("nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo_v3")


def sample(source: NvmlSource) -> Any:
    return anyio.run(source.sample, "in-process", backend="asyncio")


def test_a_steady_tick_asks_fewer_calls_than_gpustat_and_at_most_its_bound() -> None:
    first, steady, slow = placewatch_ticks(5)
    for tick in steady:
        assert tick.total() / GPUS <= STEADY_PER_GPU, tick
        assert tick.total() < GPUSTAT_OFFERED
        for call in (*FIXED, "nvmlSystemGetDriverVersion", "nvmlDeviceGetHandleByIndex_v2"):
            assert tick[call] == 0, call
        assert tick["nvmlDeviceGetTotalEccErrors"] == 0
        assert tick["nvmlDeviceGetComputeRunningProcesses_v3"] == GPUS  # one list each
        assert tick["nvmlDeviceGetProcessUtilization"] == GPUS  # one call each
    assert first["nvmlSystemGetDriverVersion"] == 1  # one for the node, not one a GPU
    assert first["nvmlDeviceGetUUID"] == GPUS
    assert slow["nvmlDeviceGetTotalEccErrors"] == 4 * GPUS  # due again past the cadence
    assert slow["nvmlDeviceGetUUID"] == 0


def with_health(nvml: FakeNvml, index: int, **changed: Any) -> None:
    device = nvml.devices[index]
    assert device.sample.health is not None
    health = msgspec.structs.replace(device.sample.health, **changed)
    device.sample = msgspec.structs.replace(device.sample, health=health)


def test_slow_readings_are_kept_until_the_cadence_then_read_again() -> None:
    nvml = FakeNvml(h200())
    source, clock = NvmlSource(nvml), Clock()
    source.cadence.clock = clock
    (gpu,), _ = sample(source)
    assert gpu.health is not None and gpu.health.ecc_corrected_volatile == 0
    with_health(nvml, 0, ecc_corrected_volatile=5, pcie_gen=4)
    clock.now += SLOW_EVERY_S - 1
    (gpu,), _ = sample(source)
    assert gpu.health is not None and (gpu.health.ecc_corrected_volatile, gpu.health.pcie_gen) == (
        0,
        5,
    )
    assert nvml.asked["nvmlDeviceGetTotalEccErrors"] == 4
    clock.now += 1
    (gpu,), _ = sample(source)
    assert gpu.health is not None and (gpu.health.ecc_corrected_volatile, gpu.health.pcie_gen) == (
        5,
        4,
    )
    assert nvml.asked["nvmlDeviceGetTotalEccErrors"] == 8


def test_an_xid_reads_its_gpus_slow_readings_at_once() -> None:
    nvml = FakeNvml([*h200(), *h200()])
    nvml.devices[1].sample = msgspec.structs.replace(nvml.devices[1].sample, index=1)
    source = NvmlSource(nvml)
    source.cadence.clock = Clock()  # never moves: only the XID makes them due
    sample(source)
    for index in (0, 1):
        with_health(nvml, index, ecc_uncorrected_volatile=2, recovery_action="reset")
    nvml.xid(0, 48)  # a double-bit ECC error
    (struck, other), _ = sample(source)
    assert struck.health is not None and struck.health.xid_errors == 1
    assert (struck.health.ecc_uncorrected_volatile, struck.health.recovery_action) == (2, "reset")
    assert other.health is not None
    assert (other.health.ecc_uncorrected_volatile, other.health.recovery_action) == (0, "none")


def test_what_does_not_change_is_read_once_and_again_when_the_gpu_count_changes() -> None:
    fake = FakeNvml(captured())
    with loaded(fake) as (pynvml, library):
        source = NvmlSource(pynvml)
        first, _ = sample(source)
        library.calls.clear()
        again, _ = sample(source)
        assert [library.calls[c] for c in FIXED] == [0, 0, 0]
        assert [(g.uuid, g.name, g.bus_id) for g in again] == [
            (g.uuid, g.name, g.bus_id) for g in first
        ]
        fake.devices.pop()  # a GPU the driver no longer counts
        (left,), _ = sample(source)
        assert [library.calls[c] for c in FIXED] == [1, 1, 1]
        assert left.uuid == first[0].uuid


def test_a_gpu_lost_after_its_handle_was_kept_is_listed_alone_and_read_again_once_back() -> None:
    nvml = FakeNvml(captured())
    source = NvmlSource(nvml)
    (busy, _), status = sample(source)
    assert status.ok
    nvml.lost = {0}  # fallen off the bus: every call on its handle answers GPU_IS_LOST
    (lost, other), status = sample(source)
    assert lost == GpuSample(index=0, vendor="nvidia", health=GpuHealth(xid_errors=0))
    assert other.memory_total_bytes is not None
    assert status.error is not None
    assert status.error.startswith("NVML cannot read GPU 0: GPU is lost; the other GPUs are read")
    nvml.lost = set()  # reset: its handle is asked again
    (back, _), status = sample(source)
    assert status.ok and back == busy


def test_a_kept_read_gives_the_same_values_as_a_read_of_everything() -> None:
    busy, idle = captured()
    mig = [Mig(1, 0, "MIG-1", "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40 << 30, 20 << 30)]
    gpus = [*node()[:2], busy, msgspec.structs.replace(idle, index=3, utilization_pct=None)]
    nvml = FakeNvml(gpus, {3: mig})
    cadence = Cadence()
    for _ in range(3):
        kept, _ = read_gpus(nvml, cadence=cadence)
        everything, _ = read_gpus(nvml)
        assert kept == everything
    assert kept[3].mig_enabled and kept[3].mig[0].uuid == "MIG-1"


def test_process_samples_are_read_in_one_call_into_room_from_the_last() -> None:
    fake = FakeNvml(node()[:1])
    pids = [p.pid for p in fake.devices[0].sample.processes]
    fake.samples[0] = [UtilizationSample(pid, 5, smUtil=30 + n) for n, pid in enumerate(pids)]
    through_bindings = ProcessUtilization().read(fake, 0, fake.devices[0])
    with loaded(fake) as (pynvml, library):
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        utilization = ProcessUtilization(slots=2)  # less than the 8 samples
        assert utilization.read(pynvml, 0, handle) == through_bindings
        assert library.calls["nvmlDeviceGetProcessUtilization"] == 2  # too small, then read
        assert utilization.slots == 8 * 2 + 5
        fake.samples[0].append(UtilizationSample(pids[0], 9, smUtil=90))
        assert utilization.read(pynvml, 0, handle) == {pids[0]: (90.0, 0.0)}
        assert library.calls["nvmlDeviceGetProcessUtilization"] == 3
        assert utilization.read(pynvml, 0, handle) == {}  # none since: NOT_FOUND, ran nothing
    assert through_bindings is not None and len(through_bindings) == 8
