"""A stand-in for libnvidia-ml.so under the real nvidia-ml-py, counting every call it gets.

nvidia-ml-py (pynvml) calls the driver's library through ctypes: each binding looks a C
function up (`_nvmlGetFunctionPointer`, a `getattr` on the loaded library) and calls it with
ctypes arguments, some bindings twice (a list's size, then the list). This stands in for the
loaded library: its functions answer from a FakeNvml (tests/support/fake_nvml.py, readings
from real captures) by filling the same ctypes out-arguments the driver fills, and count
each call by its C name. So any program on pynvml (placewatch, gpustat) runs unmodified and
is counted as the driver would count it, the bindings' own second calls included.

Only the functions those programs call are here; any other answers FUNCTION_NOT_FOUND (the
bindings' lookup raises it for a name the library lacks).
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.fake_nvml import Device, FakeNvml, MemoryV2

SUCCESS, INSUFFICIENT_SIZE = 0, 7
BASE = 0x1000
"""Handle addresses: GPU i is BASE + 16 * i. They are never dereferenced."""


def _value(arg: Any) -> Any:
    """A by-value argument as Python has it: a ctypes scalar's value, else itself."""
    return getattr(arg, "value", arg)


def _out(arg: Any) -> Any:
    """What a `byref(x)` argument points at (x), or the array passed as itself."""
    return getattr(arg, "_obj", arg)


def _set_pointer(target: Any, address: int) -> None:
    ctypes.cast(ctypes.pointer(target), ctypes.POINTER(ctypes.c_void_p)).contents.value = address


class StandInLibrary:
    """The loaded library's functions, answering from `fake`; `calls` counts them by name."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., int]:
        answer = None if name.startswith("_") else getattr(self, "_c_" + name, None)
        if answer is None:
            raise AttributeError(name)  # pynvml: FUNCTION_NOT_FOUND

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            try:
                return answer(*args)
            except self.fake.NVMLError as exc:
                return exc.value

        counted.__name__ = name
        setattr(self, name, counted)
        return counted

    def device(self, handle: Any) -> Device:
        address = ctypes.cast(handle, ctypes.c_void_p).value or 0
        return self.fake.devices[(address - BASE) // 16]

    def _scalar(self, call: str, handle: Any, *args: Any) -> int:
        """`call(handle, inputs..., out)`: the fake's answer into the last argument."""
        *inputs, out = args
        _out(out).value = getattr(self.fake, call)(self.device(handle), *map(_value, inputs))
        return SUCCESS

    def _text(self, answer: str, buffer: Any, size: Any) -> int:
        encoded = answer.encode()[: _value(size) - 1]
        ctypes.memmove(buffer, encoded + b"\0", len(encoded) + 1)
        return SUCCESS

    # The library and the node.

    def _c_nvmlInitWithFlags(self, flags: Any) -> int:
        return SUCCESS

    def _c_nvmlShutdown(self) -> int:
        return SUCCESS

    def _c_nvmlErrorString(self, result: Any) -> bytes:
        return {3: b"Not Supported", 6: b"Not Found", 10: b"Timeout", 15: b"GPU is lost"}.get(
            _value(result), b"Unknown Error"
        )

    def _c_nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        return self._text(self.fake.nvmlSystemGetDriverVersion(), buffer, size)

    def _c_nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _out(count).value = self.fake.nvmlDeviceGetCount()
        return SUCCESS

    def _c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        self.fake.nvmlDeviceGetHandleByIndex(_value(index))  # a lost GPU's is refused
        _set_pointer(_out(device), BASE + 16 * _value(index))
        return SUCCESS

    # What does not change.

    def _c_nvmlDeviceGetName(self, handle: Any, buffer: Any, size: Any) -> int:
        return self._text(self.fake.nvmlDeviceGetName(self.device(handle)), buffer, size)

    def _c_nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: Any) -> int:
        return self._text(self.fake.nvmlDeviceGetUUID(self.device(handle)), buffer, size)

    def _c_nvmlDeviceGetPciInfo_v3(self, handle: Any, info: Any) -> int:
        _out(info).busId = self.fake.nvmlDeviceGetPciInfo(self.device(handle)).busId.encode()
        return SUCCESS

    def _c_nvmlDeviceGetIndex(self, handle: Any, index: Any) -> int:
        _out(index).value = self.device(handle).sample.index
        return SUCCESS

    # Readings of one number (or two).

    def _c_nvmlDeviceGetMemoryInfo(self, handle: Any, memory: Any) -> int:
        found = self.fake.nvmlDeviceGetMemoryInfo(self.device(handle))
        target = _out(memory)
        target.total, target.used, target.free = found.total, found.used, found.free
        return SUCCESS

    def _c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, memory: Any) -> int:
        target = _out(memory)
        found = self.fake.nvmlDeviceGetMemoryInfo(self.device(handle), target.version)
        assert isinstance(found, MemoryV2)
        target.total, target.used, target.free = found.total, found.used, found.free
        target.reserved = found.reserved
        return SUCCESS

    def _c_nvmlDeviceGetUtilizationRates(self, handle: Any, rates: Any) -> int:
        found = self.fake.nvmlDeviceGetUtilizationRates(self.device(handle))
        _out(rates).gpu, _out(rates).memory = found.gpu, found.memory or 0
        return SUCCESS

    def _c_nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        _out(current).value, _out(pending).value = self.fake.nvmlDeviceGetMigMode(
            self.device(handle)
        )
        return SUCCESS

    def _pair(self, call: str, handle: Any, util: Any, period: Any) -> int:
        _out(util).value, _out(period).value = getattr(self.fake, call)(self.device(handle))
        return SUCCESS

    def _c_nvmlDeviceGetEncoderUtilization(self, *args: Any) -> int:
        return self._pair("nvmlDeviceGetEncoderUtilization", *args)

    def _c_nvmlDeviceGetDecoderUtilization(self, *args: Any) -> int:
        return self._pair("nvmlDeviceGetDecoderUtilization", *args)

    def _c_nvmlDeviceGetRemappedRows(self, handle: Any, *outs: Any) -> int:
        rows = self.fake.nvmlDeviceGetRemappedRows(self.device(handle))
        for out, value in zip(outs, rows, strict=True):
            _out(out).value = value
        return SUCCESS

    def _c_nvmlDeviceGetFieldValues(self, handle: Any, count: Any, values: Any) -> int:
        array = _out(values)
        asked = tuple(array[i].fieldId for i in range(_value(count)))
        answers = self.fake.nvmlDeviceGetFieldValues(self.device(handle), asked)
        for slot, found in zip(array, answers, strict=True):
            slot.nvmlReturn, slot.value.uiVal = found.nvmlReturn, found.value.uiVal
        return SUCCESS

    # Lists: a NULL buffer asks for the size.

    def _fill(self, found: list[Any], count: Any, records: Any, write: Callable[..., None]) -> int:
        room = _out(count)
        if records is None or room.value < len(found):
            grown = room.value < len(found)
            room.value = len(found)
            return INSUFFICIENT_SIZE if grown else SUCCESS
        for slot, record in zip(records, found, strict=False):  # the room may be larger
            write(slot, record)
        room.value = len(found)
        return SUCCESS

    def _processes(self, handle: Any, count: Any, records: Any) -> int:
        device = self.device(handle)
        found = self.fake.nvmlDeviceGetComputeRunningProcesses(device)

        def write(slot: Any, process: Any) -> None:
            slot.pid = process.pid
            used = process.usedGpuMemory
            slot.usedGpuMemory = (1 << 64) - 1 if used is None else used

        return self._fill(found, count, records, write)

    _c_nvmlDeviceGetComputeRunningProcesses_v3 = _processes

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v3(
        self, handle: Any, count: Any, records: Any
    ) -> int:
        return self._fill([], count, records, lambda *_: None)

    def _c_nvmlDeviceGetProcessUtilization(
        self, handle: Any, samples: Any, count: Any, since: Any
    ) -> int:
        found = self.fake.nvmlDeviceGetProcessUtilization(self.device(handle), _value(since))

        def write(slot: Any, sample: Any) -> None:
            slot.pid, slot.timeStamp = sample.pid, sample.timeStamp
            slot.smUtil, slot.memUtil = sample.smUtil, sample.memUtil

        return self._fill(found, count, samples, write)

    def _c_nvmlDeviceGetRetiredPages(self, handle: Any, cause: Any, count: Any, pages: Any) -> int:
        found = self.fake.nvmlDeviceGetRetiredPages(self.device(handle), _value(cause))
        room = _out(count)
        if pages is None:
            room.value = len(found)
            return INSUFFICIENT_SIZE if found else SUCCESS
        return self._fill(found, count, pages, lambda slot, page: None)

    # XID events.

    def _c_nvmlEventSetCreate(self, event_set: Any) -> int:
        self.fake.nvmlEventSetCreate()
        _set_pointer(_out(event_set), BASE * 2 + len(self.fake.event_sets))
        return SUCCESS

    def _c_nvmlDeviceRegisterEvents(self, handle: Any, types: Any, event_set: Any) -> int:
        self.fake.nvmlDeviceRegisterEvents(
            self.device(handle), _value(types), self.fake.event_sets[-1]
        )
        return SUCCESS

    def _c_nvmlEventSetWait_v2(self, event_set: Any, data: Any, timeout_ms: Any) -> int:
        event = self.fake.nvmlEventSetWait_v2(self.fake.event_sets[-1], _value(timeout_ms))
        target = _out(data)
        _set_pointer(target.device, BASE + 16 * event.device.sample.index)
        target.eventType, target.eventData = event.eventType, event.eventData
        return SUCCESS


SCALARS = (
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
)
for _call in SCALARS:
    setattr(
        StandInLibrary,
        "_c_" + _call,
        lambda self, handle, *args, _call=_call: self._scalar(_call, handle, *args),
    )


@contextmanager
def loaded(fake: FakeNvml) -> Iterator[tuple[Any, StandInLibrary]]:
    """The real pynvml module with the stand-in as its loaded library, initialised, and the
    stand-in; the bindings' own state is put back after."""
    import pynvml  # nvidia-ml-py, the worker's dependency

    library = StandInLibrary(fake)
    saved = pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache)
    pynvml.nvmlLib = library
    pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        pynvml.nvmlInit()
        library.calls.clear()
        yield pynvml, library
    finally:
        pynvml.nvmlLib = saved[0]
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlGetFunctionPointer_cache.update(saved[1])
