"""The NVML source's health readings: clocks, ECC, remapped rows, PCIe, XID events.

Served by FakeNvml from the project's real H200 (tests/fixtures/nvidia-smi/h200-q.xml,
driver 580.159.04) and two A100s whose capture has no health readings (every health call
NOT_SUPPORTED, as on a board without them).
"""

from __future__ import annotations

import ctypes
from datetime import UTC, datetime
from typing import Any

import anyio
import msgspec
import pytest

from placewatch.schemas import GpuHealth, GpuSample
from placewatch.schemas.health import CLOCK_EVENT_BITS
from placewatch.worker.gpu import health
from placewatch.worker.gpu.nvml import NvmlSource, read_gpus
from placewatch.worker.gpu.nvml.health import (
    Refusals,
    XidEvents,
    Xids,
    _identity,
    clock_events,
)

from tests.support.fake_nvml import EventSet, FakeNvml, NVMLError_NotSupported, captured, h200

WHEN = datetime(2026, 12, 1, 7, 30, tzinfo=UTC)


def read(nvml: FakeNvml, refusals: Refusals, xids: XidEvents | None = None) -> list[GpuSample]:
    gpus, _ = read_gpus(nvml, refusals=refusals, xids=xids)
    return gpus


def sample(source: NvmlSource) -> Any:
    return anyio.run(source.sample, backend="asyncio")


def test_the_h200_reads_its_clocks_ecc_remapped_rows_and_pcie() -> None:
    (gpu,) = read(FakeNvml(h200()), Refusals(), XidEvents(clock=lambda: WHEN))
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz) == (1980, 3201)
    assert gpu.memory_util_pct == 0.0
    assert gpu.fan_pct is None  # passively cooled: NOT_SUPPORTED
    assert gpu.energy_j is None  # not in the capture
    assert gpu.health == GpuHealth(
        xid_errors=0,
        ecc_corrected_volatile=0,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=0,
        ecc_uncorrected_aggregate=0,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=False,
        remapped_rows_failed=False,
        pcie_gen=5,
        pcie_width=16,
        pcie_replays=3,
        recovery_action="none",
    )
    # Page retirement is N/A on the H200 (rows are remapped instead): None, not 0.
    assert gpu.health.retired_pages_sbe is None and gpu.health.retired_pages_pending is None
    assert health.assess(gpu).health == gpu.health  # healthy, nothing to say


def test_counts_the_driver_gives_are_read_as_they_are() -> None:
    (base,) = h200()
    assert base.health is not None
    gpu = msgspec.structs.replace(
        base,
        energy_j=123456.789,
        fan_pct=45.0,
        memory_util_pct=38.0,
        health=msgspec.structs.replace(
            base.health,
            ecc_corrected_volatile=5,
            ecc_uncorrected_volatile=2,
            ecc_corrected_aggregate=17,
            ecc_uncorrected_aggregate=4,
            retired_pages_sbe=1,
            retired_pages_dbe=2,
            retired_pages_pending=True,
            remapped_rows_correctable=3,
            remapped_rows_uncorrectable=1,
            remapped_rows_pending=True,
            clock_events=["sw_power_cap", "hw_thermal_slowdown"],
            pcie_gen=4,
            pcie_width=8,
            pcie_replays=1200,
        ),
    )
    (read_,) = read(FakeNvml([gpu]), Refusals())
    assert read_.energy_j == pytest.approx(123456.789)
    assert (read_.fan_pct, read_.memory_util_pct) == (45.0, 38.0)
    h = read_.health
    assert h is not None
    assert (h.ecc_corrected_volatile, h.ecc_uncorrected_volatile) == (5, 2)
    assert (h.ecc_corrected_aggregate, h.ecc_uncorrected_aggregate) == (17, 4)
    assert (h.retired_pages_sbe, h.retired_pages_dbe, h.retired_pages_pending) == (1, 2, True)
    assert (h.remapped_rows_correctable, h.remapped_rows_uncorrectable) == (3, 1)
    assert (h.remapped_rows_pending, h.remapped_rows_failed) == (True, False)
    assert h.clock_events == ["sw_power_cap", "hw_thermal_slowdown"]
    assert (h.pcie_gen, h.pcie_width, h.pcie_replays) == (4, 8, 1200)
    assert h.xid_errors is None  # no event set asked for
    judged = health.assess(read_).health
    assert judged is not None and not judged.healthy
    assert [p.split(":")[0] for p in judged.problems] == [
        "2 uncorrected ECC error(s) since the last reset",
        "a row remapping is pending",
        "a page retirement is pending",
    ]


def test_clock_event_bits_are_nvml_h_s() -> None:
    assert clock_events(0x1FF) == [name for name in CLOCK_EVENT_BITS.values()]
    assert clock_events(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert clock_events(0) == []
    assert clock_events(0x200 | 0x400) == []  # board limit, reliability: not named
    assert clock_events(None) == []
    pynvml = pytest.importorskip("pynvml")
    spelled = {
        "gpu_idle": "GpuIdle",
        "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap",
        "hw_slowdown": "HwSlowdown",
        "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown",
        "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
        "display_clocks_setting": "DisplayClockSetting",
    }
    for bit, name in CLOCK_EVENT_BITS.items():
        assert getattr(pynvml, f"nvmlClocksEventReason{spelled[name]}") == bit
        assert getattr(pynvml, f"nvmlClocksThrottleReason{spelled[name]}") == bit


def test_a_driver_before_clock_event_reasons_answers_through_throttle_reasons() -> None:
    (base,) = h200()
    assert base.health is not None
    gpu = msgspec.structs.replace(
        base, health=msgspec.structs.replace(base.health, clock_events=["gpu_idle"])
    )
    nvml = FakeNvml([gpu])
    nvml.throttle_only = True
    refusals = Refusals()
    for _ in range(3):
        (read_,) = read(nvml, refusals)
        assert read_.health is not None and read_.health.clock_events == ["gpu_idle"]
    assert nvml.asked["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # FUNCTION_NOT_FOUND
    assert nvml.asked["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3


def test_calls_a_gpu_refuses_for_good_are_not_asked_again() -> None:
    # The H200 answers ECC and remapped rows every read; it has no fan and no page
    # retirement. The A100s' capture has no health reading at all, as a GeForce has none.
    nvml = FakeNvml([*h200(), *captured()[1:]])
    source = NvmlSource(nvml, slow_every_s=0)  # the slow counts read every tick, to count them
    for _ in range(3):
        (h200_, a100), status = sample(source)
        assert status.ok
    assert h200_.health is not None and h200_.health.pcie_replays == 3
    assert h200_.fan_pct is None and h200_.health.retired_pages_dbe is None
    assert a100.health == GpuHealth(xid_errors=0)  # only the XID count is known
    assert a100.sm_clock_mhz is None and a100.energy_j is None
    asked = nvml.asked
    assert asked["nvmlDeviceGetRemappedRows"] == 3 + 1  # the H200 each read, the A100 once
    assert asked["nvmlDeviceGetTotalEccErrors"] == 4 * 3 + 4
    assert asked["nvmlDeviceGetClockInfo"] == 2 * 3 + 2
    assert asked["nvmlDeviceGetFanSpeed"] == 2
    assert asked["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert asked["nvmlDeviceGetRetiredPages"] == 2 + 2  # single- and double-bit, once each
    assert asked["nvmlDeviceGetRetiredPagesPendingStatus"] == 2
    assert asked["nvmlDeviceGetPcieReplayCounter"] == 3 + 1


def test_a_gpu_without_a_health_reading_has_none() -> None:
    (busy, idle) = read(FakeNvml(captured()), Refusals())
    assert busy.health is None and idle.health is None


def test_xids_between_reads_are_counted_and_a_fatal_one_is_kept() -> None:
    nvml = FakeNvml(captured())
    xids = XidEvents(clock=lambda: WHEN)
    refusals = Refusals()
    first = read(nvml, refusals, xids)
    assert [g.health for g in first] == [GpuHealth(xid_errors=0)] * 2
    nvml.xid(0, 79)  # fallen off the bus: needs a reset
    nvml.xid(0, 13)  # graphics engine exception: an application's fault
    nvml.xid(1, 31)
    gpu0, gpu1 = read(nvml, refusals, xids)
    assert gpu0.health == GpuHealth(xid_errors=2, last_xid=13, last_xid_time=WHEN, fatal_xid=79)
    assert gpu1.health == GpuHealth(xid_errors=1, last_xid=31, last_xid_time=WHEN)
    judged = health.assess(gpu0).health
    assert judged is not None and not judged.healthy
    assert judged.problems == [
        "XID 79 (GPU has fallen off the bus): reset the GPU (nvidia-smi -r, with nothing "
        "running on it) or reboot the node"
    ]
    assert health.assess(gpu1).health == gpu1.health  # XID 31 alone: healthy
    again, _ = read(nvml, refusals, xids)  # no new XID: the counts stay
    assert again.health == gpu0.health
    assert len(nvml.event_sets) == 1, "the event set is made once"


def test_the_read_never_waits_for_an_xid() -> None:
    nvml = FakeNvml(captured())
    xids, refusals = XidEvents(), Refusals()
    read(nvml, refusals, xids)
    assert nvml.waits == [0]  # none held: the first wait times out at once
    nvml.xid(1, 48)
    nvml.xid(1, 48)
    _, gpu1 = read(nvml, refusals, xids)
    assert nvml.waits == [0, 0, 0, 0]  # two events, then the timeout
    assert gpu1.health is not None
    assert (gpu1.health.xid_errors, gpu1.health.fatal_xid) == (2, 48)


def test_a_gpu_that_refuses_xid_events_has_no_xid_count() -> None:
    nvml = FakeNvml([*h200(), *captured()[1:]])
    nvml.no_events = {0, 1}  # as GeForce boards and WSL answer
    xids = XidEvents()
    h200_, a100 = read(nvml, Refusals(), xids)
    assert h200_.health is not None and h200_.health.xid_errors is None
    assert h200_.health.pcie_gen == 5  # its other readings stand
    assert a100.health is None
    nvml.xid(0, 79)
    h200_, _ = read(nvml, Refusals(), xids)
    assert h200_.health is not None and h200_.health.fatal_xid is None


def test_a_node_without_an_event_set_counts_no_xid() -> None:
    class NoEvents(FakeNvml):
        def nvmlEventSetCreate(self) -> EventSet:
            raise NVMLError_NotSupported("Not Supported")

    nvml = NoEvents(captured())
    xids = XidEvents()
    busy, _ = read(nvml, Refusals(), xids)
    busy, _ = read(nvml, Refusals(), xids)
    assert busy.health is None
    assert nvml.waits == []


def test_a_gpu_lost_after_xid_79_keeps_it() -> None:
    nvml = FakeNvml(captured())
    xids, refusals = XidEvents(clock=lambda: WHEN), Refusals()
    read(nvml, refusals, xids)
    nvml.xid(0, 79)
    nvml.lost = {0}  # the driver now refuses its handle
    (lost, other), problems = read_gpus(nvml, refusals=refusals, xids=xids)
    assert problems == ["GPU 0: GPU is lost"]
    assert lost.memory_total_bytes is None
    assert lost.health == GpuHealth(xid_errors=1, last_xid=79, last_xid_time=WHEN, fatal_xid=79)
    judged = health.assess(lost).health
    assert judged is not None and not judged.healthy
    assert other.health == GpuHealth(xid_errors=0)


def test_an_events_device_is_matched_by_the_address_its_handle_holds() -> None:
    # pynvml's handles are ctypes pointers: the one in an event is a new object that
    # compares unequal to the registered one, though both point at the same device.
    pynvml = pytest.importorskip("pynvml")
    device = pynvml.struct_c_nvmlDevice_t()
    handle = ctypes.cast(ctypes.pointer(device), pynvml.c_nvmlDevice_t)
    event = pynvml.c_nvmlEventData_t(device=handle, eventType=0x8, eventData=79)
    assert event.device != handle
    xids = XidEvents()
    xids.event_set = EventSet()
    xids.by_handle[_identity(handle)] = 3
    xids.xids[3] = Xids()

    class OneEvent(FakeNvml):
        def nvmlEventSetWait_v2(self, eventSet: EventSet, timeoutms: int) -> Any:
            if self.waits:
                return super().nvmlEventSetWait_v2(eventSet, timeoutms)
            self.waits.append(timeoutms)
            return event

    xids.drain(OneEvent([]))
    assert xids.xids[3].fatal == 79


def test_a_recovery_the_driver_asks_for_makes_the_gpu_unhealthy() -> None:
    (base,) = h200()
    assert base.health is not None
    asks = msgspec.structs.replace(
        base, health=msgspec.structs.replace(base.health, recovery_action="drain_and_reset")
    )
    (gpu,) = read(FakeNvml([asks]), Refusals(), XidEvents(clock=lambda: WHEN))
    judged = health.assess(gpu).health
    assert judged is not None and judged.recovery_action == "drain_and_reset"
    assert judged.problems == [
        "the driver asks for a GPU recovery (drain_and_reset): drain its work, then reset the "
        "GPU (nvidia-smi -r, with nothing running on it) or reboot the node"
    ]


def test_a_driver_without_the_recovery_field_is_not_asked_for_it_again() -> None:
    (base,) = h200()
    assert base.health is not None
    older = msgspec.structs.replace(
        base, health=msgspec.structs.replace(base.health, recovery_action=None)
    )
    nvml, refusals = FakeNvml([older]), Refusals()
    events = XidEvents(clock=lambda: WHEN)
    for _ in range(3):
        (gpu,) = read(nvml, refusals, events)
        assert gpu.health is not None and gpu.health.recovery_action is None
    # once for the recovery field, once for the memory's temperature: neither again
    assert nvml.asked["nvmlDeviceGetFieldValues"] == 2
