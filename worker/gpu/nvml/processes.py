"""The processes on an NVIDIA GPU and what each ran, through NVML: each list in one call.

Both lists are per-process records the driver fills; each is read once per GPU a tick,
where the bindings allow in one driver call into room sized from the last read.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from placewatch.schemas import GpuProcess

from .. import values
from ..process_activity import IDLE, NO_READING, Usage, clamp_pct


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
V1 = "nvmlDeviceGetProcessUtilization"


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
    c_nvmlProcessUtilizationSample_t: pid, timeStamp, smUtil, memUtil, encUtil, decUtil),
    and asks the driver twice, as for the process list (the samples' number, then the
    samples); here the samples are read in one call into room sized from the last read, as
    the API reference allows ("processSamplesCount set to the number of entries the buffer
    is sized for"), where the bindings expose the driver's function. A driver without it
    (FUNCTION_NOT_FOUND) is asked through nvmlDeviceGetProcessesUtilizationInfo (R550 and
    later, records with the same fields). One read at a time touches it, as ProcessLists.
    """

    def __init__(self, slots: int = 64) -> None:
        self.last_seen: dict[int, int] = {}
        self.slots = slots
        self._call = V1

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
            if self._call == V1:
                return self._in_one_call(nvml, handle, since)
            return getattr(nvml, self._call)(handle, since)
        except nvml.NVMLError as exc:
            v2 = "nvmlDeviceGetProcessesUtilizationInfo"
            if getattr(exc, "value", None) != NVML_ERROR_FUNCTION_NOT_FOUND or self._call == v2:
                raise
            if not hasattr(nvml, v2):
                raise
            self._call = v2
            return getattr(nvml, v2)(handle, since)

    def _in_one_call(self, nvml: Any, handle: Any, since: int) -> Any:
        get = getattr(nvml, "_nvmlGetFunctionPointer", None)
        record = getattr(nvml, "c_nvmlProcessUtilizationSample_t", None)
        if get is None or record is None:
            return nvml.nvmlDeviceGetProcessUtilization(handle, since)
        function = get(V1)  # FUNCTION_NOT_FOUND where the driver lacks it
        while True:
            count = ctypes.c_uint(self.slots)
            records = (record * self.slots)()
            code = function(handle, records, ctypes.byref(count), ctypes.c_ulonglong(since))
            if code != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                break
            self.slots = count.value * 2 + 5  # processes may start before the next try
        if code != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(code)
        return records[: count.value]

    def _usage(self, index: int, records: Any) -> dict[int, Usage]:
        sums: dict[int, tuple[float, float, int]] = {}
        newest = self.last_seen.get(index, 0)
        for record in records or []:
            sm, mem, n = sums.get(int(record.pid), (0.0, 0.0, 0))
            sums[int(record.pid)] = (sm + record.smUtil, mem + record.memUtil, n + 1)
            newest = max(newest, int(record.timeStamp))
        self.last_seen[index] = newest
        return {pid: (sm / n, mem / n) for pid, (sm, mem, n) in sums.items()}


def processes_of(
    nvml: Any, infos: Any, usage: Mapping[int, Usage] | None = None
) -> list[GpuProcess]:
    """The processes of a list NVML gave; with `usage`, what each ran (a process NVML gave
    no sample for ran nothing: IDLE)."""
    found = []
    for info in infos or []:
        pid = int(info.pid)
        # Older bindings hand back the raw "not available" sentinel instead of None.
        used = values.whole(getattr(info, "usedGpuMemory", None))
        sm, mem = NO_READING if usage is None else usage.get(pid, IDLE)
        found.append(
            GpuProcess(pid=pid, used_bytes=used, sm_pct=clamp_pct(sm), mem_pct=clamp_pct(mem))
        )
    return found
