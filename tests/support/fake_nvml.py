"""Stands in for the NVML library (pynvml), serving readings from captured GPUs.

Built from GpuSample values parsed out of a real capture, so the NVML path is
checked against the same numbers as the nvidia-smi path. Only the calls the
worker makes are here; a call for a reading the GPU lacks raises
NVMLError_NotSupported, as NVML does.
"""

from __future__ import annotations

import ctypes
import re
import threading
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from placewatch.schemas import GpuHealth, GpuSample
from placewatch.schemas.health import CLOCK_EVENT_BITS
from placewatch.worker.gpu import recovery
from placewatch.worker.gpu.nvidia_smi.query_csv import (
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)
from placewatch.worker.gpu.nvml import MEMORY_TEMP

T = TypeVar("T")

A100X2 = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"


def captured() -> list[GpuSample]:
    """The project's two A100s (a100x2-*.csv) as nvidia-smi reads them: what FakeNvml
    serves in most tests, so that both NVIDIA paths are held to the same numbers."""
    gpus = parse_gpus((A100X2 / "a100x2-query-gpu.csv").read_text())
    return attach_processes(
        gpus, parse_compute_apps((A100X2 / "a100x2-query-compute-apps.csv").read_text())
    )


def h200() -> list[GpuSample]:
    """The project's real H200 (h200-*.csv and h200-q.xml, driver 580.159.04) with the
    clocks and health `nvidia-smi -q` printed at the same moment, as NVML would answer
    them: ECC on and no error, no page retirement (N/A: rows are remapped instead, as on
    every GPU since A100), no row remapped, no clock event, PCIe gen 5 x16 with 3 replays,
    no fan. nvidia-smi -q prints no energy counter: energy_j is None."""
    (gpu,) = attach_processes(
        parse_gpus((A100X2 / "h200-query-gpu.csv").read_text()),
        parse_compute_apps((A100X2 / "h200-query-compute-apps.csv").read_text()),
    )
    document = ET.parse(A100X2 / "h200-q.xml")
    xml = document.find("gpu")
    assert xml is not None

    def number(path: str) -> int | None:
        found = re.match(r"\d+", xml.findtext(path) or "")
        return None if found is None else int(found[0])

    def flag(path: str) -> bool | None:
        return {"Yes": True, "No": False}.get(xml.findtext(path) or "")

    def ecc(counter: str, names: tuple[str, ...]) -> int | None:
        counts = [number(f"ecc_errors/{counter}/{name}") for name in names]
        return None if None in counts else sum(c or 0 for c in counts)

    corrected = ("sram_correctable", "dram_correctable")
    uncorrected = ("sram_uncorrectable_parity", "sram_uncorrectable_secded", "dram_uncorrectable")
    reasons = "clocks_event_reasons/clocks_event_reason_"
    health = GpuHealth(
        ecc_corrected_volatile=ecc("volatile", corrected),
        ecc_uncorrected_volatile=ecc("volatile", uncorrected),
        ecc_corrected_aggregate=ecc("aggregate", corrected),
        ecc_uncorrected_aggregate=ecc("aggregate", uncorrected),
        retired_pages_sbe=number("retired_pages/multiple_single_bit_retirement/retired_count"),
        retired_pages_dbe=number("retired_pages/double_bit_retirement/retired_count"),
        retired_pages_pending=flag("retired_pages/pending_retirement"),
        remapped_rows_correctable=number("remapped_rows/remapped_row_corr"),
        remapped_rows_uncorrectable=number("remapped_rows/remapped_row_unc"),
        remapped_rows_pending=flag("remapped_rows/remapped_row_pending"),
        remapped_rows_failed=flag("remapped_rows/remapped_row_failure"),
        recovery_action=(xml.findtext("gpu_recovery_action") or "").lower() or None,
        clock_events=[
            n for n in CLOCK_EVENT_BITS.values() if xml.findtext(reasons + n) == "Active"
        ],
        pcie_gen=number("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        pcie_width=number("pci/pci_gpu_link_info/link_widths/current_link_width"),
        pcie_replays=number("pci/replay_counter"),
    )
    fan = number("fan_speed")
    memory_util = number("utilization/memory_util")
    return [
        msgspec.structs.replace(
            gpu,
            sm_clock_mhz=number("clocks/sm_clock"),
            memory_clock_mhz=number("clocks/mem_clock"),
            memory_util_pct=None if memory_util is None else float(memory_util),
            fan_pct=None if fan is None else float(fan),
            driver_version=document.findtext("driver_version"),
            health=health,
        )
    ]


NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0
nvmlMemory_v2 = 0x02000028
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
nvmlEventTypeXidCriticalError = 0x8


class NVMLError(Exception):
    """As nvidia-ml-py's: `value` is the NVML return code (999, NVML_ERROR_UNKNOWN)."""

    value = 999


@dataclass(frozen=True)
class FieldNumber:
    """c_nvmlValue_t, as far as an unsigned int reads it."""

    uiVal: int


@dataclass(frozen=True)
class FieldValue:
    """c_nvmlFieldValue_t: the field asked, NVML's return for it, and its value."""

    fieldId: int
    nvmlReturn: int
    value: FieldNumber


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NotFound(NVMLError):
    value = 6


class NVMLError_FunctionNotFound(NVMLError):
    value = 13


class NVMLError_Timeout(NVMLError):
    value = 10


class NVMLError_GpuIsLost(NVMLError):
    value = 15


@dataclass
class Memory:
    """nvmlMemory_t: `used` counts what the driver reserves for itself."""

    total: int
    used: int
    free: int


@dataclass
class MemoryV2:
    """nvmlMemory_v2_t (drivers R510 and later): the reserve apart, `used` without it."""

    version: int
    total: int
    reserved: int
    free: int
    used: int


@dataclass
class Utilization:
    """nvmlUtilization_t. NVML gives both or neither; a capture may hold only `gpu`, and
    the other is then None here, not a made-up 0."""

    gpu: int
    memory: int | None = None


@dataclass
class Pci:
    busId: str


@dataclass
class Process:
    pid: int
    usedGpuMemory: int | None


@dataclass
class UtilizationSample:
    """c_nvmlProcessUtilizationSample_t: what one process ran in one sample period, in
    percent of it; timeStamp in microseconds (NVML's CPU timestamp)."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0
    encUtil: int = 0
    decUtil: int = 0


@dataclass
class Mig:
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    name: str
    total: int
    used: int
    processes: list[Process] = field(default_factory=list)


@dataclass
class Device:
    """A GPU's handle. A lost GPU (fallen off the bus) answers NVML_ERROR_GPU_IS_LOST to
    every call on it, as NVML does for a handle taken before the loss."""

    sample: GpuSample
    mig: list[Mig] = field(default_factory=list)
    lost: bool = False

    @property
    def gpu(self) -> GpuSample:
        if self.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        return self.sample


@dataclass
class Event:
    """c_nvmlEventData_t: `device` is the handle of the GPU it came from."""

    device: Device
    eventData: int
    eventType: int = nvmlEventTypeXidCriticalError
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class EventSet:
    """An nvmlEventSet_t: the GPUs registered on it and the events it holds, oldest first."""

    registered: list[Device] = field(default_factory=list)
    held: list[Event] = field(default_factory=list)
    freed: bool = False


class FakeNvml:
    """A capture's memory.used leaves out what the driver reserves for itself (nvidia-smi
    R510 and later: total = reserved + used + free), which NVML's v1 reading counts as used
    and its v2 reading gives apart. `v2=False` is a driver without the v2 reading."""

    NVMLError = NVMLError
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    nvmlMemory_v2 = nvmlMemory_v2
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = (
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = (
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError

    def __init__(
        self,
        gpus: list[GpuSample],
        mig: dict[int, list[Mig]] | None = None,
        v2: bool = True,
    ) -> None:
        self.devices = [Device(g, (mig or {}).get(g.index, [])) for g in gpus]
        self.v2 = v2
        self.hang = threading.Event()  # set: every call blocks until release is set
        self.release = threading.Event()
        self.calls = 0
        self.failing = False  # set: every call fails, as when the driver stops answering
        # Per-process utilization: the samples the driver holds, by GPU index; GPUs that
        # answer NOT_SUPPORTED (a vGPU guest, before Maxwell); a driver without the v1 call
        # (FUNCTION_NOT_FOUND: the v2 answers instead); the timestamps each read asked from.
        self.samples: dict[int, list[UtilizationSample]] = {}
        self.no_utilization: set[int] = set()
        self.v1_gone = False
        self.asked_since: list[tuple[int, int]] = []
        # Health: how often each call was made, by name; a driver before R535 (no clock
        # event reasons, only throttle reasons); GPUs that refuse XID events (GeForce, WSL);
        # the event sets made and the timeout each wait was given, in ms.
        self.asked: Counter[str] = Counter()
        self.throttle_only = False
        self.no_events: set[int] = set()
        self.event_sets: list[EventSet] = []
        self.waits: list[int] = []

    @property
    def lost(self) -> set[int]:
        """GPUs fallen off the bus (Xid 79), by index: their handles are refused, and every
        call on a handle taken before."""
        return {d.sample.index for d in self.devices if d.lost}

    @lost.setter
    def lost(self, indices: set[int]) -> None:
        for device in self.devices:
            device.lost = device.sample.index in indices

    def _wait(self) -> None:
        self.calls += 1
        if self.failing:
            raise NVMLError("Unknown Error")
        if self.hang.is_set():
            self.release.wait(30)

    @staticmethod
    def _need(value: T | None) -> T:
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver of the first GPU: one driver serves a node's NVIDIA GPUs."""
        return self._need(self.devices[0].sample.driver_version if self.devices else None)

    def nvmlDeviceGetCount(self) -> int:
        self._wait()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Device:
        if index in self.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        return self.devices[index]

    def nvmlDeviceGetUUID(self, h: Device | Mig) -> str:
        return h.uuid if isinstance(h, Mig) else self._need(h.gpu.uuid)

    def nvmlDeviceGetName(self, h: Device | Mig) -> str:
        return h.name if isinstance(h, Mig) else self._need(h.gpu.name)

    def nvmlDeviceGetPciInfo(self, h: Device) -> Pci:
        return Pci(self._need(h.gpu.bus_id))

    def nvmlDeviceGetUtilizationRates(self, h: Device) -> Utilization:
        memory = h.gpu.memory_util_pct
        return Utilization(
            round(self._need(h.gpu.utilization_pct)), None if memory is None else round(memory)
        )

    def nvmlDeviceGetMemoryInfo(self, h: Device | Mig, version: int = 0) -> Memory | MemoryV2:
        if version and not self.v2:
            raise NVMLError_FunctionNotFound("Function Not Found")
        if isinstance(h, Mig):
            total, used, free = h.total, h.used, h.total - h.used
        else:
            g = h.gpu
            total = self._need(g.memory_total_bytes)
            used = self._need(g.memory_used_bytes)
            free = self._need(g.memory_free_bytes)
        if version:
            return MemoryV2(version, total, total - used - free, free, used)
        return Memory(total, total - free, free)

    def nvmlDeviceGetTemperature(self, h: Device, sensor: int) -> int:
        return round(self._need(h.gpu.temperature_c))

    def nvmlDeviceGetPowerUsage(self, h: Device) -> int:
        return round(self._need(h.gpu.power_w) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Device) -> int:
        return round(self._need(h.gpu.power_cap_w) * 1000)

    def nvmlDeviceGetMigMode(self, h: Device) -> tuple[int, int]:
        mode = 1 if h.mig else 0
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Device) -> int:
        return 7 if h.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Device, slot: int) -> Mig:
        if slot >= len(h.mig):
            raise NVMLError("Not Found")
        return h.mig[slot]

    def nvmlDeviceGetGpuInstanceId(self, h: Mig) -> int:
        return h.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, h: Mig) -> int:
        return h.compute_instance_id

    def nvmlDeviceGetProcessUtilization(self, h: Device, timeStamp: int) -> list[UtilizationSample]:
        """Samples newer than `timeStamp`; NOT_FOUND when there are none, as the driver says
        when no process ran since then."""
        if self.v1_gone:
            raise NVMLError_FunctionNotFound("Function Not Found")
        return self._utilization(h, timeStamp)

    def nvmlDeviceGetProcessesUtilizationInfo(
        self, h: Device, timeStamp: int
    ) -> list[UtilizationSample]:
        return self._utilization(h, timeStamp)

    def _utilization(self, h: Device, since: int) -> list[UtilizationSample]:
        index = h.gpu.index
        self.asked_since.append((index, since))
        if h.mig or index in self.no_utilization:
            raise NVMLError_NotSupported("Not Supported")
        found = [s for s in self.samples.get(index, []) if s.timeStamp > since]
        if not found:
            raise NVMLError_NotFound("Not Found")
        return found

    def nvmlDeviceGetComputeRunningProcesses(self, h: Device | Mig) -> list[Process]:
        if isinstance(h, Mig):
            return h.processes
        if h.mig:
            return []  # NVML lists a MIG GPU's processes per instance
        return [Process(p.pid, p.used_bytes) for p in h.gpu.processes]

    # Health: each call counted in `asked`; what the GPU's sample lacks is NOT_SUPPORTED.

    def _health(self, call: str, h: Device) -> GpuHealth:
        self.asked[call] += 1
        return self._need(h.gpu.health)

    def nvmlDeviceGetClockInfo(self, h: Device, type: int) -> int:
        self.asked["nvmlDeviceGetClockInfo"] += 1
        g = h.gpu
        return self._need(g.sm_clock_mhz if type == NVML_CLOCK_SM else g.memory_clock_mhz)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Device) -> int:
        self.asked["nvmlDeviceGetTotalEnergyConsumption"] += 1
        return round(self._need(h.gpu.energy_j) * 1000)

    def nvmlDeviceGetEncoderUtilization(self, h: Device) -> list[int]:
        self.asked["nvmlDeviceGetEncoderUtilization"] += 1
        return [round(self._need(h.gpu.encoder_util_pct)), 167_000]

    def nvmlDeviceGetDecoderUtilization(self, h: Device) -> list[int]:
        self.asked["nvmlDeviceGetDecoderUtilization"] += 1
        return [round(self._need(h.gpu.decoder_util_pct)), 167_000]

    def nvmlDeviceGetFanSpeed(self, h: Device) -> int:
        self.asked["nvmlDeviceGetFanSpeed"] += 1
        return round(self._need(h.gpu.fan_pct))

    def nvmlDeviceGetTotalEccErrors(self, h: Device, errorType: int, counterType: int) -> int:
        health = self._health("nvmlDeviceGetTotalEccErrors", h)
        counts = {
            (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC): health.ecc_corrected_volatile,
            (
                NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                NVML_VOLATILE_ECC,
            ): health.ecc_uncorrected_volatile,
            (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC): health.ecc_corrected_aggregate,
            (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC): (
                health.ecc_uncorrected_aggregate
            ),
        }
        return self._need(counts[errorType, counterType])

    def nvmlDeviceGetRetiredPages(self, h: Device, sourceFilter: int) -> list[int]:
        """The retired pages' addresses, as many as the sample counts."""
        health = self._health("nvmlDeviceGetRetiredPages", h)
        sbe = sourceFilter == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        count = self._need(health.retired_pages_sbe if sbe else health.retired_pages_dbe)
        return [0x1000 * (n + 1) for n in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Device) -> int:
        health = self._health("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return int(self._need(health.retired_pages_pending))

    def nvmlDeviceGetRemappedRows(self, h: Device) -> tuple[int, int, int, int]:
        health = self._health("nvmlDeviceGetRemappedRows", h)
        return (
            self._need(health.remapped_rows_correctable),
            self._need(health.remapped_rows_uncorrectable),
            int(self._need(health.remapped_rows_pending)),
            int(self._need(health.remapped_rows_failed)),
        )

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Device) -> int:
        if self.throttle_only:
            self.asked["nvmlDeviceGetCurrentClocksEventReasons"] += 1
            raise NVMLError_FunctionNotFound("Function Not Found")
        return self._reasons("nvmlDeviceGetCurrentClocksEventReasons", h)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Device) -> int:
        return self._reasons("nvmlDeviceGetCurrentClocksThrottleReasons", h)

    def _reasons(self, call: str, h: Device) -> int:
        names = self._health(call, h).clock_events
        return sum(bit for bit, name in CLOCK_EVENT_BITS.items() if name in names)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Device) -> int:
        return self._need(self._health("nvmlDeviceGetCurrPcieLinkGeneration", h).pcie_gen)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Device) -> int:
        return self._need(self._health("nvmlDeviceGetCurrPcieLinkWidth", h).pcie_width)

    def nvmlDeviceGetPcieReplayCounter(self, h: Device) -> int:
        return self._need(self._health("nvmlDeviceGetPcieReplayCounter", h).pcie_replays)

    def nvmlDeviceGetFieldValues(self, h: Device, fieldIds: tuple[int, ...]) -> list[FieldValue]:
        """The GPU recovery action and the memory's temperature; a field the GPU's sample
        lacks answers NOT_SUPPORTED inside the call, which itself succeeds, as NVML does."""
        self.asked["nvmlDeviceGetFieldValues"] += 1
        action = None if h.gpu.health is None else h.gpu.health.recovery_action
        codes = {name: code for code, name in recovery.ACTIONS.items()}
        known: dict[int, int | None] = {
            recovery.FIELD_GPU_RECOVERY_ACTION: codes.get(action) if action else None,
            MEMORY_TEMP: None
            if h.gpu.memory_temperature_c is None
            else round(h.gpu.memory_temperature_c),
        }
        return [
            FieldValue(field, 0, FieldNumber(value))
            if (value := known.get(field)) is not None
            else FieldValue(field, NVMLError_NotSupported.value, FieldNumber(0))
            for field in fieldIds
        ]

    # XID events: `xid` stands in for the driver reporting one.

    def nvmlEventSetCreate(self) -> EventSet:
        self.event_sets.append(EventSet())
        return self.event_sets[-1]

    def nvmlDeviceRegisterEvents(self, h: Device, eventTypes: int, eventSet: EventSet) -> None:
        assert eventTypes == nvmlEventTypeXidCriticalError
        if h.gpu.index in self.no_events:
            raise NVMLError_NotSupported("Not Supported")
        eventSet.registered.append(h)

    def nvmlEventSetWait_v2(self, eventSet: EventSet, timeoutms: int) -> Event:
        """The oldest event held; NVMLError_Timeout when none (at once: no clock here)."""
        self.waits.append(timeoutms)
        if not eventSet.held:
            raise NVMLError_Timeout("Timeout")
        return eventSet.held.pop(0)

    def nvmlEventSetFree(self, eventSet: EventSet) -> None:
        eventSet.freed = True

    def xid(self, index: int, xid: int) -> None:
        """The driver reports critical XID `xid` on GPU `index`, to every set it is on."""
        device = self.devices[index]
        for event_set in self.event_sets:
            if any(d is device for d in event_set.registered):
                event_set.held.append(Event(device, xid))


class ProcessRecord(ctypes.Structure):
    """nvmlProcessInfo_v2_t, which nvidia-ml-py also names c_nvmlProcessInfo_v3_t."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class FakeNvmlLibrary(FakeNvml):
    """FakeNvml that also exposes the driver's process-list function, as nvidia-ml-py does
    (`_nvmlGetFunctionPointer`): it fills the caller's records, or says how many it needs.
    `lists` counts its calls."""

    NVML_SUCCESS = 0
    NVML_ERROR_INSUFFICIENT_SIZE = 7
    c_nvmlProcessInfo_v3_t = ProcessRecord

    def __init__(self, gpus: list[GpuSample]) -> None:
        super().__init__(gpus)
        self.lists = 0

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        assert name == "nvmlDeviceGetComputeRunningProcesses_v3"
        return self._list

    def _list(self, h: Device, count: Any, records: Any) -> int:
        self.lists += 1
        found = self.nvmlDeviceGetComputeRunningProcesses(h)
        room = count._obj  # what ctypes.byref wraps
        if len(found) > room.value:
            room.value = len(found)
            return self.NVML_ERROR_INSUFFICIENT_SIZE
        for slot, process in zip(records, found, strict=False):
            slot.pid = process.pid
            slot.usedGpuMemory = (
                (1 << 64) - 1 if process.usedGpuMemory is None else process.usedGpuMemory
            )
        room.value = len(found)
        return self.NVML_SUCCESS
