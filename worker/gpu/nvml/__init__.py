"""NVIDIA GPUs through NVML in process (nvidia-ml-py), with no subprocess.

An NVML call takes microseconds where spawning nvidia-smi takes tens of
milliseconds of CPU, so a node that has the library (the `nvml` extra and
the driver's libnvidia-ml.so) reads its GPUs this way. NVML enumerates in
PCI bus order, the same physical index nvidia-smi prints.

NVML calls block in the driver and can hang there like nvidia-smi does, so
a tick's reads run in a worker thread, one at a time (worker/gpu/read_thread.py), with a
timeout; a read that does not come back is abandoned and no new read starts
until it does (the source reads degraded meanwhile). Health counts and XID
events are read through nvml/health.py, in the same read.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import anyio

from placewatch.schemas import GpuProcess, GpuSample, MigInstance, SourceStatus
from placewatch.schemas.messages import Vendor

from .. import ActivityWanted, SourceOptions, values
from ..process_activity import IDLE, NO_READING, Usage, clamp_pct
from ..read_thread import ReadThread
from .health import Refusals, XidEvents, field_value, read_health

MEMORY_TEMP = 82
"""NVML_FI_DEV_MEMORY_TEMP: the memory's temperature, a field value (DCGM_FI_DEV_MEMORY_TEMP)."""

log = logging.getLogger(__name__)

NAME = "nvml"


LIBRARY = "libnvidia-ml.so.1"
"""The driver's NVML library, as nvidia-ml-py loads it on Linux."""
DRIVER_HINT = "is the NVIDIA driver loaded?"


def load() -> tuple[Any, str | None]:
    """The initialised pynvml module, or None and why it cannot be used.

    On a node without the NVIDIA driver the library is looked for before the bindings are
    imported: importing them costs more than the rest of `placewatch sample`'s own modules.
    """
    if sys.platform == "linux":
        try:
            ctypes.CDLL(LIBRARY)
        except OSError:
            return None, f"NVML did not initialise: {LIBRARY} not found ({DRIVER_HINT})"
    try:
        import pynvml  # noqa: PLC0415 - loaded only on a node that reads NVML
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML did not initialise: {exc} ({DRIVER_HINT})"
    return pynvml, None


def read_gpus(
    nvml: Any,
    lists: ProcessLists | None = None,
    utilization: ProcessUtilization | None = None,
    refusals: Refusals | None = None,
    xids: XidEvents | None = None,
) -> tuple[list[GpuSample], list[str]]:
    """Every GPU as NVML sees it, and why any cannot be read at all; a reading NVML refuses
    is None. With `utilization`, what each listed process ran since the last read, too;
    with `refusals`, the calls a GPU refused for good are not asked again; with `xids`,
    each GPU's critical XIDs since the first read. Blocking.

    A GPU the driver lost (Xid 79, fallen off the bus) refuses even its handle: it is
    listed by its index alone, with the XIDs it had (79 among them), and the others are
    read as usual.
    """
    lists = lists or ProcessLists()
    refusals = refusals or Refusals()
    gpus, problems = [], []
    handles: dict[int, Any] = {}
    lost: dict[int, str] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            lost[index] = str(exc)
    if xids is not None:
        xids.start(nvml, handles)
        xids.drain(nvml)
    for index in sorted([*handles, *lost]):
        if index in lost:
            problems.append(f"GPU {index}: {lost[index]}")
            health = None if xids is None else xids.attach(index, None)
            gpus.append(GpuSample(index=index, vendor="nvidia", health=health))
            continue
        handle = handles[index]
        gpus.append(
            _read_gpu(nvml, index, handle, lists, utilization, refusals=refusals, xids=xids)
        )
    return gpus, problems


def _read_gpu(
    nvml: Any,
    index: int,
    handle: Any,
    lists: ProcessLists,
    utilization: ProcessUtilization | None,
    *,
    refusals: Refusals,
    xids: XidEvents | None,
) -> GpuSample:
    def ask(call: str | Callable[..., Any], *args: Any) -> Any:
        try:
            return (getattr(nvml, call) if isinstance(call, str) else call)(*args)
        except nvml.NVMLError:
            return None

    def once(call: str, *args: Any) -> Any:  # not asked again once refused for good
        return refusals.ask(nvml, index, call, handle, *args)

    memory = _memory(nvml, handle, ask)
    rates = ask("nvmlDeviceGetUtilizationRates", handle)
    pci = ask("nvmlDeviceGetPciInfo", handle)
    power_mw = _whole(ask("nvmlDeviceGetPowerUsage", handle))
    cap_mw = _whole(ask("nvmlDeviceGetEnforcedPowerLimit", handle))
    energy_mj = _whole(once("nvmlDeviceGetTotalEnergyConsumption"))
    fan = once("nvmlDeviceGetFanSpeed")
    mode = ask("nvmlDeviceGetMigMode", handle)
    mig_enabled = None if mode is None else mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
    listed = ask(lists.read, nvml, handle)
    # What each process ran, where asked: NVML gives no per-process utilization on a MIG GPU
    # (NOT_SUPPORTED), so it is not asked there. Each process is built once, with it.
    usage = None
    if utilization is not None and listed and not mig_enabled:
        usage = utilization.read(nvml, index, handle)
    processes = _processes(nvml, listed, usage)
    instances: list[MigInstance] = []
    if mig_enabled:
        # On a MIG GPU, processes are listed per instance, not on the parent.
        instances, mig_processes = _mig(nvml, handle, ask, lists)
        processes += mig_processes
    util = None if rates is None else _pct(rates.gpu)
    health = read_health(nvml, index, handle, refusals)
    encoder, decoder = (
        once("nvmlDeviceGetEncoderUtilization"),
        once("nvmlDeviceGetDecoderUtilization"),
    )
    memory_temp = field_value(nvml, index, handle, refusals, MEMORY_TEMP)
    return GpuSample(
        index=index,
        uuid=_str(ask("nvmlDeviceGetUUID", handle)),
        vendor="nvidia",
        name=_str(ask("nvmlDeviceGetName", handle)),
        bus_id=None if pci is None else _str(pci.busId),
        utilization_pct=util,
        activity=None if util is None else "busy",
        memory_total_bytes=None if memory is None else memory.total,
        memory_used_bytes=None if memory is None else memory.used,
        memory_free_bytes=None if memory is None else memory.free,
        temperature_c=_float(ask("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)),
        power_w=None if power_mw is None else power_mw / 1000,
        power_cap_w=None if cap_mw is None else cap_mw / 1000,
        processes=processes,
        mig_enabled=mig_enabled,
        mig=instances,
        sm_clock_mhz=_whole(once("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)),
        memory_clock_mhz=_whole(once("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM)),
        memory_util_pct=None if rates is None else _pct(rates.memory),
        energy_j=None if energy_mj is None else energy_mj / 1000,
        # NVML: "may exceed 100% in certain cases" (a share of the noise-tolerance maximum).
        fan_pct=None if _float(fan) is None else min(float(fan), 100.0),
        memory_reserved_bytes=None if memory is None else memory.reserved,
        memory_temperature_c=None if memory_temp is None else float(memory_temp),
        encoder_util_pct=None if not encoder else _pct(encoder[0]),
        decoder_util_pct=None if not decoder else _pct(decoder[0]),
        driver_version=_str(ask("nvmlSystemGetDriverVersion")),
        health=health if xids is None else xids.attach(index, health),
    )


def _mig(
    nvml: Any, handle: Any, ask: Any, lists: ProcessLists
) -> tuple[list[MigInstance], list[GpuProcess]]:
    instances = []
    processes = []
    for slot in range(ask("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
        mig = ask("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig is None:
            continue  # an empty slot
        memory = _memory(nvml, mig, ask)
        name = _str(ask("nvmlDeviceGetName", mig))
        instances.append(
            MigInstance(
                gpu_instance_id=ask("nvmlDeviceGetGpuInstanceId", mig),
                compute_instance_id=ask("nvmlDeviceGetComputeInstanceId", mig),
                uuid=_str(ask("nvmlDeviceGetUUID", mig)),
                # "NVIDIA H100 80GB HBM3 MIG 1g.10gb": the profile is the last word.
                profile=name.rsplit(" ", 1)[-1] if name and " MIG " in name else None,
                memory_total_bytes=None if memory is None else memory.total,
                memory_used_bytes=None if memory is None else memory.used,
            )
        )
        processes += _processes(nvml, ask(lists.read, nvml, mig))
    return instances, processes


class Memory(NamedTuple):
    total: int
    used: int
    free: int
    reserved: int | None = None


def _memory(nvml: Any, handle: Any, ask: Any) -> Memory | None:
    """Memory as nvidia-smi reports it: `used` without what the driver reserves for itself.

    NVML's first reading counts that reserve as used: hundreds of MiB on an idle
    datacenter GPU that no process holds. Its v2 reading (drivers R510 and later) gives
    the reserve apart; a driver without it gets the first.
    """
    version = getattr(nvml, "nvmlMemory_v2", None)
    memory = None if version is None else ask("nvmlDeviceGetMemoryInfo", handle, version)
    if memory is not None:
        total, free, reserved = _whole(memory.total), _whole(memory.free), _whole(memory.reserved)
        used = None
        if total is not None and free is not None and reserved is not None:
            used = max(total - free - reserved, 0)
    else:
        memory = ask("nvmlDeviceGetMemoryInfo", handle)
        if memory is None:
            return None
        total, used, free = _whole(memory.total), _whole(memory.used), _whole(memory.free)
        reserved = None
    if total is None or used is None or free is None:
        return None  # a u64 sentinel or garbage: no reading, not 16 EiB
    return Memory(total, used, free, reserved)


class ProcessLists:
    """Reads the compute processes of a GPU, with room for as many as the last list had.

    nvidia-ml-py asks the driver twice for each list (its length, then the list) and wraps
    every record in an object of its own: 0.9 to 1.6 ms of CPU a list of 64 processes on an
    H200, most of it in the driver, against 0.6 to 0.7 ms in one call. Here the list is read
    in one call into room sized from the last one, where the bindings expose the driver's
    function; else through them.
    """

    def __init__(self, slots: int = 64) -> None:
        self.slots = slots

    def read(self, nvml: Any, handle: Any) -> Any:
        """The compute processes on `handle`, as NVML's process records."""
        get = getattr(nvml, "_nvmlGetFunctionPointer", None)
        record = getattr(nvml, "c_nvmlProcessInfo_v3_t", None)
        if get is None or record is None:
            return nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        function = get("nvmlDeviceGetComputeRunningProcesses_v3")
        while True:
            count = ctypes.c_uint(self.slots)
            records = (record * self.slots)()
            code = function(handle, ctypes.byref(count), records)
            if code != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                break
            self.slots = count.value * 2 + 5  # processes may start before the next try
        if code != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(code)
        return records[: count.value]


NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13


class ProcessUtilization:
    """What each process ran on each GPU since the last read, from NVML's samples.

    The driver keeps per-process samples (the share of each sample period, 1/6 s to 1 s by
    product, that the process had kernels on the SMs, and that the memory controller served
    it) and hands back those newer than the timestamp it is given, one record per process
    that ran and none for a process that did not (NVML API reference, R550 to R590). A read
    with no sample since that timestamp fails with NVML_ERROR_NOT_FOUND: nothing ran, which
    is a reading of 0 for every process, not an error. The newest timestamp seen is kept per
    GPU, so each read covers the time since the one before; the first covers what the driver
    still holds. A GPU that cannot say (NOT_SUPPORTED: MIG, a vGPU guest, before Maxwell)
    gives no reading.

    nvidia-ml-py binds the call as nvmlDeviceGetProcessUtilization (records of
    c_nvmlProcessUtilizationSample_t: pid, timeStamp, smUtil, memUtil, encUtil, decUtil);
    a driver without it (FUNCTION_NOT_FOUND) is asked through
    nvmlDeviceGetProcessesUtilizationInfo (R550 and later, records with the same fields).
    One read at a time touches it, as ProcessLists.
    """

    def __init__(self) -> None:
        self.last_seen: dict[int, int] = {}
        self._call = "nvmlDeviceGetProcessUtilization"

    def read(self, nvml: Any, index: int, handle: Any) -> dict[int, Usage] | None:
        """pid -> (SM %, memory %) of the processes that ran on GPU `index` since the last
        read (a process left out ran nothing), or None where NVML cannot tell. Blocking."""
        try:
            records = self._records(nvml, handle, self.last_seen.get(index, 0))
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            # The bindings raise NVMLError(SUCCESS) for an empty answer to the sizing call.
            return {} if code in (NVML_ERROR_NOT_FOUND, 0) else None
        except (AttributeError, TypeError):  # bindings without the call, or a broken record
            return None
        return self._usage(index, records)

    def _records(self, nvml: Any, handle: Any, since: int) -> Any:
        try:
            return getattr(nvml, self._call)(handle, since)
        except nvml.NVMLError as exc:
            v2 = "nvmlDeviceGetProcessesUtilizationInfo"
            if getattr(exc, "value", None) != NVML_ERROR_FUNCTION_NOT_FOUND or self._call == v2:
                raise
            if not hasattr(nvml, v2):
                raise
            self._call = v2
            return getattr(nvml, v2)(handle, since)

    def _usage(self, index: int, records: Any) -> dict[int, Usage]:
        sums: dict[int, tuple[float, float, int]] = {}
        newest = self.last_seen.get(index, 0)
        for record in records or []:
            sm, mem, n = sums.get(int(record.pid), (0.0, 0.0, 0))
            sums[int(record.pid)] = (sm + record.smUtil, mem + record.memUtil, n + 1)
            newest = max(newest, int(record.timeStamp))
        self.last_seen[index] = newest
        return {pid: (sm / n, mem / n) for pid, (sm, mem, n) in sums.items()}


def _processes(nvml: Any, infos: Any, usage: Mapping[int, Usage] | None = None) -> list[GpuProcess]:
    """The processes of a list NVML gave; with `usage`, what each ran (a process NVML gave
    no sample for ran nothing: IDLE)."""
    found = []
    for info in infos or []:
        pid = int(info.pid)
        # Older bindings hand back the raw "not available" sentinel instead of None.
        used = _whole(getattr(info, "usedGpuMemory", None))
        sm, mem = NO_READING if usage is None else usage.get(pid, IDLE)
        found.append(
            GpuProcess(pid=pid, used_bytes=used, sm_pct=clamp_pct(sm), mem_pct=clamp_pct(mem))
        )
    return found


def _str(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value if isinstance(value, str) and value else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


_whole = values.whole


def _pct(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and 0 <= value <= 100 else None


class NvmlSource:
    """NVIDIA readings from NVML; `nvml` is the pynvml module (or a stand-in in tests)."""

    name: ClassVar[str] = NAME
    vendor: ClassVar[Vendor] = "nvidia"

    def __init__(self, nvml: Any = None, timeout_s: float = 5.0) -> None:
        self._nvml = nvml
        self._why_not: str | None = None
        self.timeout_s = timeout_s
        self.thread = ReadThread()  # its reads, one at a time, off the loop
        self._lists = ProcessLists()  # touched by one read at a time: a stuck one blocks the next
        self._utilization = ProcessUtilization()  # the same
        self._refusals = Refusals()  # the same
        self._xids = XidEvents()  # the same; its event set lives as long as the worker

    @classmethod
    def build(cls, options: SourceOptions) -> NvmlSource:
        return cls(timeout_s=options.runner.timeout_s)

    def unavailable(self) -> str | None:
        if self._nvml is None and self._why_not is None:
            self._nvml, self._why_not = load()
        return self._why_not if self._nvml is None else None

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """This tick's GPUs; unless `activity` is "no", what each process ran since the last
        read too (in the same read as the rest: NVML answers in microseconds)."""
        started = time.perf_counter()

        def status(error: str | None = None, degraded: bool = False) -> SourceStatus:
            latency = round((time.perf_counter() - started) * 1000, 3)
            return SourceStatus(
                name=NAME,
                ok=error is None,
                latency_ms=latency,
                error=error,
                vendor="nvidia",
                degraded=degraded,
            )

        why_not = self.unavailable()
        if why_not is not None:
            return [], status(why_not)
        if self.thread.busy:
            return [], status(
                "an NVML call has not returned for over "
                f"{self.timeout_s:g} s (GPU stuck in the driver? check dmesg for Xid errors)",
                degraded=True,
            )
        utilization = self._utilization if activity != "no" else None
        read = functools.partial(
            read_gpus, self._nvml, self._lists, utilization, self._refusals, self._xids
        )
        found: tuple[list[GpuSample], list[str]] | None = None
        try:
            with anyio.move_on_after(self.timeout_s):
                found = await self.thread.run(read)
        except self._nvml.NVMLError as exc:
            return [], status(f"NVML failed: {exc}")
        if found is None:
            log.warning("NVML read timed out after %g s; abandoning it", self.timeout_s)
            return [], status(f"NVML timed out after {self.timeout_s:g} s", degraded=True)
        gpus, problems = found
        if problems:
            return gpus, status(
                f"NVML cannot read {'; '.join(problems)}; the other GPUs are read (a GPU the "
                "driver lost needs a reset or a reboot: check dmesg for Xid errors)"
            )
        return gpus, status()
