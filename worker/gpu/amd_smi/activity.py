"""What each process ran on each AMD GPU, from `amd-smi process --json`.

amd-smi gives each process's engine time as `usage` (`engine_usage` in the library and in
the by-pid listing): `gfx` and `enc`, the nanoseconds the process kept each engine busy
since it opened the GPU, a counter (amd_smi_lib's amdsmi_proc_info_t, read from the DRM
fdinfo `drm-engine-gfx`). The ROCm 6.0 to 6.2 builds print it bare (`"gfx": 1532177`),
later ones value-wrapped (`{"value": 1532177, "unit": "ns"}`); the first CLI (2023)
labelled it `%` in its readable output, and a reading that says `%` is taken as one. A
counter becomes a share of time between two reads of the same process.

A zero says nothing about ROCm compute: HIP and ROCm work goes to the GPU through KFD
user-mode queues, which the DRM scheduler never sees, so a process computing flat out reads
`GFX: 0 ns` (ROCm/amdsmi#130, amd-smi 25.3 on ROCm 6.4, with the GPU at 97% busy). Only
work the DRM scheduler runs (graphics, Vulkan: llama.cpp's Vulkan backend) is counted. So
only a share above 0 is a reading here; a zero is None, and the verdict never takes an AMD
GPU's silence for idleness.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from placewatch.schemas import GpuSample

from .. import values
from ..process_activity import NO_READING, Usage, attach_usage

BLOCKS = ("usage", "engine_usage")
_NUMBER_UNIT = re.compile(r"^\s*([0-9.eE+-]+)\s*(%|ns)?\s*$")

EngineTime = tuple[float, str]
"""A process's gfx reading and its unit: "ns" (a counter) or "%" (a share)."""


def _gfx(process: dict[str, object]) -> EngineTime | None:
    value: object = None
    for name in BLOCKS:
        block = process.get(name)
        if isinstance(block, dict):
            value = block.get("gfx")
            break
    unit: object = None
    if isinstance(value, dict):  # value-wrapped, as amd-smi prints from ROCm 6.3
        wrapped = value
        value, unit = wrapped.get("value"), wrapped.get("unit")
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        if match is None:
            return None
        value, unit = match[1], match[2] or unit
    number = values.number(value)
    if number is None or number < 0:
        return None
    return number, "%" if unit == "%" else "ns"


def parse_engine_time(
    entries: Iterable[tuple[int, int, dict[str, object]]],
) -> dict[tuple[int, int], EngineTime]:
    """(GPU index, pid) -> its gfx engine reading, from the processes of `amd-smi process
    --json` (amd_smi.process_entries); processes without one are left out. Never raises."""
    found: dict[tuple[int, int], EngineTime] = {}
    for index, pid, process in entries:
        reading = _gfx(process)
        if reading is not None:
            found[(index, pid)] = reading
    return found


class EngineClock:
    """The last gfx counter of each (GPU, pid) and when it was read, to turn the next into a
    share of the time between."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple[float, float]] = {}

    def usage(
        self, readings: dict[tuple[int, int], EngineTime], now_s: float
    ) -> dict[int, dict[int, Usage]]:
        """GPU index -> pid -> (gfx share, None); a process first seen, or whose counter
        went back (a new client), has no share yet; a share of 0 is no reading (above)."""
        found: dict[int, dict[int, Usage]] = {}
        last, self._last = self._last, {}
        for key, (value, unit) in readings.items():
            share: float | None = value
            if unit == "ns":
                self._last[key] = (value, now_s)
                before = last.get(key)
                share = None
                if before is not None and value >= before[0] and now_s > before[1]:
                    share = (value - before[0]) / ((now_s - before[1]) * 1e9) * 100
            if share is not None and share > 0:
                found.setdefault(key[0], {})[key[1]] = (share, None)
        return found


def attach_engine_time(
    gpus: list[GpuSample],
    clock: EngineClock,
    entries: Iterable[tuple[int, int, dict[str, object]]],
    now_s: float,
) -> list[GpuSample]:
    """Each GPU's processes with the gfx share amd-smi gives them (None where it does not)."""
    usage = clock.usage(parse_engine_time(entries), now_s)
    return [attach_usage(g, usage.get(g.index, {}), NO_READING) for g in gpus]
