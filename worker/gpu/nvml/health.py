"""A GPU's health through NVML: the counts GpuHealth carries, and XID errors as they come.

The source reads counts only; worker/gpu/health.py judges them. Three things keep a tick
cheap on an 8-GPU node:

- The counts change slowly and are read at the slow cadence (nvml/cadence.py), and at
  once after an XID on the GPU; only the clock event reasons are read every tick.
- A call a GPU refuses for good (NOT_SUPPORTED: ECC on a GeForce, page retirement on
  A100 and later, the fan of a passively cooled datacenter card; FUNCTION_NOT_FOUND: a
  driver older than the call; or bindings without it) is remembered per GPU and not asked
  again while the worker runs. A change of ECC mode takes effect only at a GPU reset or a
  reboot; a GPU that gains ECC so is read for it once the worker restarts.
- XIDs come from an NVML event set, drained each read with a timeout of 0 ms: the driver
  answers an event it holds, or NVML_ERROR_TIMEOUT at once, and the read never waits.
  nvidia-smi prints no XIDs (the kernel log does), so they are counted since the worker
  started.

The refusals and the XID counts are touched by one read at a time, as the process lists in
nvml/processes.py: a read stuck in the driver blocks the next.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import msgspec

from placewatch.schemas import GpuHealth

from .. import recovery, values
from ..clock_events import clock_event_names
from ..health import RESET_XIDS

log = logging.getLogger(__name__)

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13
REFUSED_FOR_GOOD = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)

MAX_EVENTS_A_READ = 1024
"""Events drained at most in one read: a driver that never says "no more" cannot hold a
tick; what is left waits for the next read."""


class Refusals:
    """The calls each GPU refused for good, by GPU index, and not asked again."""

    def __init__(self) -> None:
        self.refused: dict[int, set[tuple[Any, ...]]] = {}

    def ask(self, nvml: Any, index: int, call: str, handle: Any, *args: Any) -> Any:
        """NVML's answer to `call(handle, *args)`, or None where it gives none."""
        key = (call, *args)
        refused = self.refused.setdefault(index, set())
        if key in refused:
            return None
        function = getattr(nvml, call, None)
        if function is None:  # bindings older than the call
            refused.add(key)
            return None
        try:
            return function(handle, *args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in REFUSED_FOR_GOOD:
                refused.add(key)
            return None

    def refuse(self, index: int, call: str, *args: Any) -> None:
        """Ask `call(handle, *args)` of GPU `index` no more: it answered, refusing inside."""
        self.refused.setdefault(index, set()).add((call, *args))


def read_counts(nvml: Any, index: int, handle: Any, refusals: Refusals) -> GpuHealth:
    """GPU `index`'s health counts, clock events and XIDs apart: what changes slowly, read
    at the slow cadence (nvml/cadence.py)."""

    def ask(call: str, *args: Any) -> Any:
        return refusals.ask(nvml, index, call, handle, *args)

    corrected = nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    volatile, aggregate = nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC
    sbe = nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    dbe = nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    ecc = "nvmlDeviceGetTotalEccErrors"
    retired = "nvmlDeviceGetRetiredPages"
    remapped = ask("nvmlDeviceGetRemappedRows")
    pending = ask("nvmlDeviceGetRetiredPagesPendingStatus")
    return GpuHealth(
        ecc_corrected_volatile=_count(ask(ecc, corrected, volatile)),
        ecc_uncorrected_volatile=_count(ask(ecc, uncorrected, volatile)),
        ecc_corrected_aggregate=_count(ask(ecc, corrected, aggregate)),
        ecc_uncorrected_aggregate=_count(ask(ecc, uncorrected, aggregate)),
        retired_pages_sbe=_length(ask(retired, sbe)),
        retired_pages_dbe=_length(ask(retired, dbe)),
        retired_pages_pending=None if pending is None else bool(pending),
        remapped_rows_correctable=None if remapped is None else _count(remapped[0]),
        remapped_rows_uncorrectable=None if remapped is None else _count(remapped[1]),
        remapped_rows_pending=None if remapped is None else bool(remapped[2]),
        remapped_rows_failed=None if remapped is None else bool(remapped[3]),
        pcie_gen=_count(ask("nvmlDeviceGetCurrPcieLinkGeneration")),
        pcie_width=_count(ask("nvmlDeviceGetCurrPcieLinkWidth")),
        pcie_replays=_count(ask("nvmlDeviceGetPcieReplayCounter")),
        recovery_action=_recovery_action(nvml, index, handle, refusals),
    )


def read_reasons(nvml: Any, index: int, handle: Any, refusals: Refusals) -> Any:
    """GPU `index`'s clock event reasons, NVML's bitmask, or None: read every tick."""
    reasons = refusals.ask(nvml, index, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # drivers before R535 name them throttle reasons
        reasons = refusals.ask(nvml, index, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return reasons


def with_clock_events(counts: GpuHealth | None, reasons: Any) -> GpuHealth | None:
    """The health counts with the clock events of `reasons`; None where NVML gave none of
    them (no count, no reasons)."""
    health = msgspec.structs.replace(counts or GpuHealth(), clock_events=clock_events(reasons))
    return None if health == GpuHealth() and reasons is None else health


def _recovery_action(nvml: Any, index: int, handle: Any, refusals: Refusals) -> str | None:
    """The recovery the driver asks for (R570 and later), by its field value."""
    code = field_value(nvml, index, handle, refusals, recovery.FIELD_GPU_RECOVERY_ACTION)
    return None if code is None else recovery.from_code(code)


def field_value(
    nvml: Any, index: int, handle: Any, refusals: Refusals, field_id: int
) -> int | None:
    """One unsigned field value (nvmlDeviceGetFieldValues): a field a driver does not know
    answers inside the call, which itself succeeds; it is not asked again."""
    fields = (field_id,)
    answer = refusals.ask(nvml, index, "nvmlDeviceGetFieldValues", handle, fields)
    if not answer:
        return None
    field = answer[0]
    if field.nvmlReturn != 0:
        if field.nvmlReturn in REFUSED_FOR_GOOD:
            refusals.refuse(index, "nvmlDeviceGetFieldValues", fields)
        return None
    return int(field.value.uiVal)


def clock_events(reasons: Any) -> list[str]:
    """The names of the clock event reasons set in NVML's bitmask; none for no reading."""
    if not isinstance(reasons, int):
        return []
    return clock_event_names(reasons)


_count = values.whole


def _length(pages: Any) -> int | None:
    return None if pages is None else len(pages)


class Xids(NamedTuple):
    """One GPU's critical XIDs since the worker started."""

    errors: int = 0
    last: int | None = None
    time: datetime | None = None
    fatal: int | None = None

    def seen(self, xid: int, when: datetime) -> Xids:
        fatal = xid if xid in RESET_XIDS else self.fatal
        return Xids(self.errors + 1, xid, when, fatal)


class XidEvents:
    """Critical XID errors from one NVML event set, counted per GPU index.

    The set is made at the first read, in the read thread, with every GPU whose handle
    NVML gives registered for nvmlEventTypeXidCriticalError; a GPU that refuses (GeForce
    boards and WSL answer NOT_SUPPORTED) or has no handle then is not registered, and has
    no XID reading. The set lives as long as the worker: no source is ever closed, and the
    driver frees it with the process's NVML handles when the worker exits (nvmlShutdown is
    not called either). `clock` says when an event was read.
    """

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self.started = False
        self.event_set: Any = None
        self.by_handle: dict[Any, int] = {}  # a registered handle's identity -> GPU index
        self.xids: dict[int, Xids] = {}  # registered GPUs only
        self.failing = False  # the last wait failed otherwise than by its timeout: logged once

    def start(self, nvml: Any, handles: dict[int, Any]) -> None:
        """Make the set and register `handles` (GPU index -> handle), once."""
        if self.started:
            return
        self.started = True
        try:
            self.event_set = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError) as exc:
            log.info("NVML gives no XID events (%s): XID errors are not counted", exc)
            return
        for index, handle in handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self.event_set
                )
            except nvml.NVMLError as exc:
                log.info(
                    "GPU %d gives no XID events (%s): its XID errors are not counted", index, exc
                )
                continue
            self.by_handle[_identity(handle)] = index
            self.xids[index] = Xids()

    def drain(self, nvml: Any) -> set[int]:
        """Count the XIDs the driver holds, without waiting for one: the GPUs they came from."""
        came: set[int] = set()
        if self.event_set is None:
            return came
        for _ in range(MAX_EVENTS_A_READ):
            try:
                event = nvml.nvmlEventSetWait_v2(self.event_set, 0)
            except nvml.NVMLError as exc:
                failed = getattr(exc, "value", None) != NVML_ERROR_TIMEOUT
                if failed and not self.failing:
                    log.warning("reading NVML's XID events failed (%s); tried again each read", exc)
                self.failing = failed
                return came
            if not int(event.eventType) & nvml.nvmlEventTypeXidCriticalError:
                continue
            index = self.by_handle.get(_identity(event.device))
            if index is None:
                log.warning("XID %d on a GPU not registered: not counted", event.eventData)
                continue
            self.xids[index] = self.xids[index].seen(int(event.eventData), self.clock())
            came.add(index)
        return came

    def attach(self, index: int, health: GpuHealth | None) -> GpuHealth | None:
        """`health` with GPU `index`'s XIDs; unchanged for a GPU not registered."""
        xids = self.xids.get(index)
        if xids is None:
            return health
        return msgspec.structs.replace(
            health or GpuHealth(),
            xid_errors=xids.errors,
            last_xid=xids.last,
            last_xid_time=xids.time,
            fatal_xid=xids.fatal,
        )


def _identity(handle: Any) -> Any:
    """What tells one GPU's handle from another's. pynvml's are ctypes pointers, a new
    object each time (an event's device too), so by the address they hold; a stand-in's,
    by the object itself."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return id(handle)
