"""Stands in for the NVML library (pynvml), serving readings from captured GPUs.

Built from GpuSample values parsed out of a real capture, so the NVML path is
checked against the same numbers as the nvidia-smi path. Only the calls the
worker makes are here; a call for a reading the GPU lacks raises
NVMLError_NotSupported, as NVML does.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from placewatch.gpu.nvidia_smi_csv import attach_processes, parse_compute_apps, parse_gpus
from placewatch.schemas import GpuSample

T = TypeVar("T")

A100X2 = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"


def captured() -> list[GpuSample]:
    """The project's two A100s (a100x2-*.csv) as nvidia-smi reads them: what FakeNvml
    serves in most tests, so that both NVIDIA paths are held to the same numbers."""
    gpus = parse_gpus((A100X2 / "a100x2-query-gpu.csv").read_text())
    return attach_processes(
        gpus, parse_compute_apps((A100X2 / "a100x2-query-compute-apps.csv").read_text())
    )


NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0
nvmlMemory_v2 = 0x02000028


class NVMLError(Exception):
    """As nvidia-ml-py's: `value` is the NVML return code (999, NVML_ERROR_UNKNOWN)."""

    value = 999


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NotFound(NVMLError):
    value = 6


class NVMLError_FunctionNotFound(NVMLError):
    value = 13


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
    gpu: int
    memory: int = 0


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
    gpu: GpuSample
    mig: list[Mig] = field(default_factory=list)


class FakeNvml:
    """A capture's memory.used leaves out what the driver reserves for itself (nvidia-smi
    R510 and later: total = reserved + used + free), which NVML's v1 reading counts as used
    and its v2 reading gives apart. `v2=False` is a driver without the v2 reading."""

    NVMLError = NVMLError
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    nvmlMemory_v2 = nvmlMemory_v2

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
        self.lost: set[int] = set()  # GPUs fallen off the bus (Xid 79), by index
        # Per-process utilization: the samples the driver holds, by GPU index; GPUs that
        # answer NOT_SUPPORTED (a vGPU guest, before Maxwell); a driver without the v1 call
        # (FUNCTION_NOT_FOUND: the v2 answers instead); the timestamps each read asked from.
        self.samples: dict[int, list[UtilizationSample]] = {}
        self.no_utilization: set[int] = set()
        self.v1_gone = False
        self.asked_since: list[tuple[int, int]] = []

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
        return Utilization(round(self._need(h.gpu.utilization_pct)))

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
