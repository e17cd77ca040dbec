"""NVIDIA GPUs through NVML in process (nvidia-ml-py), with no subprocess.

An NVML call takes microseconds where spawning nvidia-smi takes tens of
milliseconds of CPU, so a node that has the library (the `nvml` extra and
the driver's libnvidia-ml.so) reads its GPUs this way. NVML enumerates in
PCI bus order, the same physical index nvidia-smi prints.

NVML calls block in the driver and can hang there like nvidia-smi does, so
a tick's reads run in a worker thread, one at a time (worker/gpu/read_thread.py), with a
timeout; a read that does not come back is abandoned and no new read starts
until it does (the source reads degraded meanwhile). Health counts and XID
events are read through nvml/health.py, the processes through nvml/processes.py, in the
same read; which readings are asked once, slowly or every tick is nvml/cadence.py's.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import anyio

from placewatch.schemas import GpuProcess, GpuSample, MigInstance, SourceStatus
from placewatch.schemas.messages import Vendor

from .. import ActivityWanted, SourceOptions, values
from ..read_thread import ReadThread
from .cadence import SLOW_EVERY_S, Cadence, Fixed, Slow
from .health import (
    Refusals,
    XidEvents,
    field_value,
    read_counts,
    read_reasons,
    with_clock_events,
)
from .processes import ProcessLists as ProcessLists
from .processes import ProcessUtilization as ProcessUtilization
from .processes import processes_of

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
    *,
    cadence: Cadence | None = None,
) -> tuple[list[GpuSample], list[str]]:
    """Every GPU as NVML sees it, and why any cannot be read at all; a reading NVML refuses
    is None. With `utilization`, what each listed process ran since the last read, too;
    with `refusals`, the calls a GPU refused for good are not asked again; with `xids`,
    each GPU's critical XIDs since the first read; with `cadence`, what was read before is
    asked again only as often as nvml/cadence.py says (without, everything is asked).
    Blocking.

    A GPU the driver lost (Xid 79, fallen off the bus) refuses even its handle, and every
    call on a handle kept from before: it is listed by its index alone, with the XIDs it had
    (79 among them), and the others are read as usual.
    """
    lists = lists or ProcessLists()
    refusals = refusals or Refusals()
    cadence = cadence or Cadence()
    gpus, problems = [], []
    lost: dict[int, str] = {}
    cadence.counted(nvml.nvmlDeviceGetCount())
    for index in range(cadence.count or 0):
        if index not in cadence.handles:
            try:
                cadence.handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                lost[index] = str(exc)
    if xids is not None:
        xids.start(nvml, cadence.handles)
        cadence.xids(xids.drain(nvml))
    if not cadence.driver_read:  # one driver serves the node's NVIDIA GPUs
        cadence.driver_read = True
        try:
            cadence.driver = _str(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            cadence.driver = None
    for index in range(cadence.count or 0):
        if index not in lost:
            try:
                gpu = _read_gpu(
                    nvml, index, lists, utilization, refusals, cadence=cadence, xids=xids
                )
                gpus.append(gpu)
                continue
            except GpuLost as exc:
                cadence.lost(index)
                lost[index] = str(exc)
        problems.append(f"GPU {index}: {lost[index]}")
        health = None if xids is None else xids.attach(index, None)
        gpus.append(GpuSample(index=index, vendor="nvidia", health=health))
    return gpus, problems


NVML_ERROR_GPU_IS_LOST = 15


class GpuLost(Exception):
    """A call on a GPU's handle answered NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus."""


def _ask(nvml: Any, call: str | Callable[..., Any], *args: Any) -> Any:
    """NVML's answer, or None where it gives none; GpuLost where the GPU is lost."""
    try:
        return (getattr(nvml, call) if isinstance(call, str) else call)(*args)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
            raise GpuLost(str(exc)) from exc
        return None


def _read_gpu(
    nvml: Any,
    index: int,
    lists: ProcessLists,
    utilization: ProcessUtilization | None,
    refusals: Refusals,
    *,
    cadence: Cadence,
    xids: XidEvents | None,
) -> GpuSample:
    handle = cadence.handles[index]
    ask = functools.partial(_ask, nvml)

    def once(call: str, *args: Any) -> Any:  # not asked again once refused for good
        return refusals.ask(nvml, index, call, handle, *args)

    memory = _memory(nvml, handle, ask)  # first: a GPU lost since the last tick says so here
    fixed = cadence.fixed.get(index) or _read_fixed(index, handle, ask, cadence)
    slow = cadence.slow_of(index) or _read_slow(
        nvml, index, handle, ask, refusals=refusals, cadence=cadence
    )
    rates = ask("nvmlDeviceGetUtilizationRates", handle)
    power_mw = _whole(ask("nvmlDeviceGetPowerUsage", handle))
    energy_mj = _whole(once("nvmlDeviceGetTotalEnergyConsumption"))
    fan = once("nvmlDeviceGetFanSpeed")
    processes, instances = _gpu_processes(
        nvml,
        index,
        handle,
        ask,
        lists=lists,
        utilization=utilization,
        mig_enabled=slow.mig_enabled,
    )
    util = None if rates is None else _pct(rates.gpu)
    health = with_clock_events(slow.counts, read_reasons(nvml, index, handle, refusals))
    encoder, decoder = (
        once("nvmlDeviceGetEncoderUtilization"),
        once("nvmlDeviceGetDecoderUtilization"),
    )
    memory_temp = field_value(nvml, index, handle, refusals, MEMORY_TEMP)
    return GpuSample(
        index=index,
        uuid=fixed.uuid,
        vendor="nvidia",
        name=fixed.name,
        bus_id=fixed.bus_id,
        utilization_pct=util,
        activity=None if util is None else "busy",
        memory_total_bytes=None if memory is None else memory.total,
        memory_used_bytes=None if memory is None else memory.used,
        memory_free_bytes=None if memory is None else memory.free,
        temperature_c=_float(ask("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)),
        power_w=None if power_mw is None else power_mw / 1000,
        power_cap_w=slow.power_cap_w,
        processes=processes,
        mig_enabled=slow.mig_enabled,
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
        driver_version=cadence.driver,
        health=health if xids is None else xids.attach(index, health),
    )


def _read_fixed(index: int, handle: Any, ask: Any, cadence: Cadence) -> Fixed:
    """GPU `index`'s identity, read now and kept (nvml/cadence.py)."""
    pci = ask("nvmlDeviceGetPciInfo", handle)
    fixed = Fixed(
        uuid=_str(ask("nvmlDeviceGetUUID", handle)),
        name=_str(ask("nvmlDeviceGetName", handle)),
        bus_id=None if pci is None else _str(pci.busId),
    )
    cadence.fixed[index] = fixed
    return fixed


def _gpu_processes(
    nvml: Any,
    index: int,
    handle: Any,
    ask: Any,
    *,
    lists: ProcessLists,
    utilization: ProcessUtilization | None,
    mig_enabled: bool | None,
) -> tuple[list[GpuProcess], list[MigInstance]]:
    """The GPU's processes, with what each ran where `utilization` is asked, and its MIG
    instances."""
    listed = ask(lists.read, nvml, handle)
    # NVML gives no per-process utilization on a MIG GPU (NOT_SUPPORTED), so it is not asked
    # there. Each process is built once, with it.
    usage = None
    if utilization is not None and listed and not mig_enabled:
        usage = utilization.read(nvml, index, handle)
    processes = processes_of(nvml, listed, usage)
    instances: list[MigInstance] = []
    if mig_enabled:
        # On a MIG GPU, processes are listed per instance, not on the parent.
        instances, mig_processes = _mig(nvml, handle, ask, lists)
        processes += mig_processes
    return processes, instances


def _read_slow(
    nvml: Any, index: int, handle: Any, ask: Any, *, refusals: Refusals, cadence: Cadence
) -> Slow:
    """GPU `index`'s slow readings, read now and kept (nvml/cadence.py)."""
    cap_mw = _whole(ask("nvmlDeviceGetEnforcedPowerLimit", handle))
    mode = ask("nvmlDeviceGetMigMode", handle)
    return cadence.keep_slow(
        index,
        power_cap_w=None if cap_mw is None else cap_mw / 1000,
        mig_enabled=None if mode is None else mode[0] == nvml.NVML_DEVICE_MIG_ENABLE,
        counts=read_counts(nvml, index, handle, refusals),
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
        processes += processes_of(nvml, ask(lists.read, nvml, mig))
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

    def __init__(
        self, nvml: Any = None, timeout_s: float = 5.0, slow_every_s: float = SLOW_EVERY_S
    ) -> None:
        self._nvml = nvml
        self._why_not: str | None = None
        self.timeout_s = timeout_s
        self.thread = ReadThread()  # its reads, one at a time, off the loop
        self._lists = ProcessLists()  # touched by one read at a time: a stuck one blocks the next
        self._utilization = ProcessUtilization()  # the same
        self._refusals = Refusals()  # the same
        self._xids = XidEvents()  # the same; its event set lives as long as the worker
        self.cadence = Cadence(slow_every_s)  # the same: what was read once and slowly

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
            read_gpus,
            self._nvml,
            self._lists,
            utilization,
            self._refusals,
            self._xids,
            cadence=self.cadence,
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
