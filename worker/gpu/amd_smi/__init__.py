"""AMD GPUs through amd-smi, rocm-smi's successor (ROCm 6.0 onward).

The same reading comes in several shapes across amd-smi versions:

- the document is a list of GPUs (the ROCm 6 builds), `{"gpu_data": [...]}`
  (later builds, AMDSMI 26.x among them), `{"gpu": [...]}`, or a lone GPU
  object when one GPU was asked for;
- a reading is bare (`"gfx_activity": 72`), a string with its unit
  (`"72 %"`), or value-wrapped (`{"value": 72, "unit": "%"}`);
- readings sit in blocks (`usage`, `power`, `temperature`, `mem_usage`) or
  flat on the GPU (fields.py finds them).

Each GPU's index is its top-level `"gpu"` key: nested blocks carry their own
`gpu` keys (the XGMI link matrix lists every peer), so no deeper one is read.
Any output with per-GPU items works: `amd-smi list` and `xgmi` give bus ids
(`bdf`), `static` the name and the power cap.

`amd-smi metric` prints no power cap (MI300X, AMDSMI 26.0.2), so its
activity is usually the busy percentage; power over cap, as rocm-smi gives
it, is used wherever a cap is present. MI300X has no edge sensor: its
temperature is the junction (amd-smi calls it `hotspot`). Clocks, the
memory controller's busy share, energy and the fan come from the `clock`,
`usage`, `energy` and `fan` blocks; ECC, PCIe and throttle counts are read by
health.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import anyio.to_thread
import msgspec

from placewatch.schemas import GpuProcess, GpuSample, SourceStatus

from ...probe import ProbeResult, ProbeRunner
from .. import KFD_ROOT, ActivityWanted, AmdToolSource, kfd, values
from ..rocm_smi import amd_sample, load_json
from .activity import EngineClock, attach_engine_time
from .fields import Spec, count, number, reading, text
from .health import read_health

TOOL = "amd-smi"

# Only the blocks that are read. Not --pcie: its bandwidth reading makes amdgpu wait a second
# per GPU (sysfs pcie_bw), 8 s a tick on an 8-GPU MI300X node, so the PCIe link and replay
# counts are read only where a full `metric` or a CSV prints them. Every flag is in the
# amd-smi of ROCm 6.0 to 6.2 (its argument parser), but --ecc, --fan and --energy only on
# bare-metal Linux: a build that refuses one (a VM guest) gets the basic blocks, and one
# that refuses those the full form.
METRIC_ARGS = (
    "metric", "--usage", "--power", "--clock", "--temperature", "--mem-usage",
    "--ecc", "--fan", "--energy", "--json",
)  # fmt: skip
METRIC_BASIC_ARGS = ("metric", "--usage", "--power", "--temperature", "--mem-usage", "--json")
METRIC_ALL_ARGS = ("metric", "--json")
PROCESS_ARGS = ("process", "--json")

_POWER_NAMES = ("socket_power", "current_socket_power", "average_socket_power")
POWER: Spec = ((("power",), _POWER_NAMES), ((), _POWER_NAMES))
# `static --limit`: ROCm 6.x-7.1 print the current cap as `socket_power`
# (`max_power` is the most it may be set to); 7.2 moved it under `ppt0`.
CAP: Spec = (
    (("limit", "ppt0"), ("socket_power_limit",)),
    (("limit",), ("socket_power", "socket_power_limit", "power_cap")),
    (("power",), ("power_limit", "power_cap", "socket_power_limit")),
    ((), ("power_limit", "power_cap", "socket_power_limit")),
)
BUSY: Spec = ((("usage",), ("gfx_activity",)), ((), ("gfx_activity", "gpu_busy_percent")))
TOTAL: Spec = (
    (("mem_usage",), ("total_vram",)),
    (("vram",), ("size",)),
    ((), ("total_vram", "vram_total")),
)
USED: Spec = ((("mem_usage",), ("used_vram",)), ((), ("used_vram", "vram_used")))
FREE: Spec = ((("mem_usage",), ("free_vram",)), ((), ("free_vram",)))
NAME: Spec = (
    (("asic",), ("market_name",)),
    (("board",), ("product_name",)),
    ((), ("market_name",)),
)
BUS: Spec = (((), ("bdf",)), (("bus",), ("bdf",)))
UUID: Spec = (((), ("uuid",)), (("asic",), ("uuid",)))
# MI300X has a gfx clock per XCD (gfx_0..gfx_7, ROCm 6.1.2 on); ROCm 6.0-6.1.0 print one
# `gfx` and one `MEM` clock, 6.0 as `cur_clk`. Flattened to CSV: gfx_0_clk, mem_0_clk.
GFX_CLOCK: Spec = (
    (("clock", "gfx_0"), ("clk",)),
    (("clock", "gfx"), ("clk", "cur_clk")),
    ((), ("gfx_0_clk",)),
)
MEM_CLOCK: Spec = (
    (("clock", "mem_0"), ("clk",)),
    (("clock", "MEM"), ("clk", "cur_clk")),
    ((), ("mem_0_clk",)),
)
# umc_activity is the memory controller's busy share, as DCGM's memory utilization.
MEMORY_BUSY: Spec = ((("usage",), ("umc_activity",)), ((), ("umc_activity",)))
ENERGY: Spec = ((("energy",), ("total_energy_consumption",)), ((), ("total_energy_consumption",)))
_JOULES_PER_UNIT = {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6}
# The fan's share of its maximum speed. Flattened, `usage` is the fan's only when its block
# was printed (its `rpm` is beside it): the engine block's own name is `usage` too.
FAN: Spec = ((("fan",), ("usage",)),)
FAN_FLAT: Spec = (((), ("usage",)),)
# amd-smi's `hotspot` is the sensor rocm-smi calls junction.
SENSORS = (
    ("edge", ("edge", "temperature_edge")),
    ("junction", ("hotspot", "junction", "temperature_hotspot")),
    ("memory", ("mem", "memory", "temperature_mem")),
)


def _bytes(item: Mapping[str, object], spec: Spec) -> int | None:
    # amd-smi's "MB" are MiB: MI300X's 192 GiB of HBM reads 196592 MB after reserved pages.
    value, unit = reading(item, spec)
    return values.to_bytes(value, unit or "MB")


def _joules(item: Mapping[str, object]) -> float | None:
    # amd-smi prints J (uJ from the driver's counter, divided by 10^6 before printing).
    value, unit = reading(item, ENERGY)
    amount = values.number(value)
    scale = _JOULES_PER_UNIT.get(unit or "J")
    if amount is None or amount < 0 or scale is None:
        return None
    return amount * scale


def _temperature(item: Mapping[str, object]) -> tuple[float | None, str | None]:
    for label, names in SENSORS:
        found = number(item, ((("temperature",), names), ((), names)))
        if found is not None:
            return found, label
    return None, None


def _sample(index: int, item: Mapping[str, object]) -> GpuSample:
    temperature, sensor = _temperature(item)
    fan = reading(item, FAN if "rpm" not in item else FAN_FLAT)[0]
    return amd_sample(
        index,
        power=number(item, POWER),
        cap=number(item, CAP),
        busy=values.percent(reading(item, BUSY)[0]),
        total=_bytes(item, TOTAL),
        used=_bytes(item, USED),
        free=_bytes(item, FREE),
        temperature=temperature,
        sensor=sensor,
        uuid=text(item, UUID),
        name=text(item, NAME),
        bus_id=text(item, BUS),
        sm_clock_mhz=count(item, GFX_CLOCK),
        memory_clock_mhz=count(item, MEM_CLOCK),
        memory_util_pct=values.percent(reading(item, MEMORY_BUSY)[0]),
        energy_j=_joules(item),
        fan_pct=values.percent(fan),
        health=read_health(item),
    )


def _items(document: object) -> list[dict[str, object]]:
    """The per-GPU objects of any amd-smi JSON shape."""
    items: object = []
    if isinstance(document, list):
        items = document
    elif isinstance(document, dict):
        if isinstance(document.get("gpu_data"), list):
            items = document["gpu_data"]
        elif isinstance(document.get("gpu"), list):
            items = document["gpu"]
        elif "gpu" in document:
            items = [document]
    if not isinstance(items, list):
        return []
    return [{str(k): v for k, v in item.items()} for item in items if isinstance(item, dict)]


def _index(item: Mapping[str, object], position: int) -> int | None:
    """The item's top-level "gpu" key, or its position when it has none."""
    raw = item.get("gpu")
    if raw is None or isinstance(raw, dict | list):
        return position
    index = values.integer(raw)
    return index if index is not None and index >= 0 else None


def _gpus(items: list[dict[str, object]]) -> list[GpuSample]:
    found: dict[int, GpuSample] = {}
    for position, item in enumerate(items):
        index = _index(item, position)
        if index is not None and index not in found:
            found[index] = _sample(index, item)
    return [found[i] for i in sorted(found)]


def parse_amd_smi(text: str) -> list[GpuSample]:
    """GPUs from any amd-smi JSON output (metric, static, list, xgmi); never raises."""
    return _gpus(_items(load_json(text)))


def parse_amd_smi_processes(text: str) -> list[tuple[int, int, int | None, str | None]]:
    """(GPU index, pid, VRAM bytes, name) from `amd-smi process --json`; never raises.

    The ROCm 6 builds wrap each process as `{"process_info": {...}}` and print
    `{"process_info": "No running processes detected"}` for an idle GPU;
    later builds may list the process objects themselves. VRAM is
    `memory_usage.vram_mem` (bytes, value-wrapped); `mem_usage` where that
    is missing (older builds, a readable string such as "12.3 MB").
    """
    found: list[tuple[int, int, int | None, str | None]] = []
    for index, pid, process in process_entries(text):
        value, unit = reading(
            process,
            ((("memory_usage",), ("vram_mem",)), ((), ("vram_mem", "mem_usage", "mem"))),
        )
        vram = values.to_bytes(value, unit or "B")
        found.append((index, pid, vram, values.text(process.get("name"))))
    return found


def process_entries(text: str) -> Iterator[tuple[int, int, dict[str, object]]]:
    """(GPU index, pid, the process's object) of every process in `amd-smi process --json`,
    in any of its shapes (see parse_amd_smi_processes); never raises."""
    for position, item in enumerate(_items(load_json(text))):
        index = _index(item, position)
        entries = item.get("process_list", item.get("processes"))
        if index is None or not isinstance(entries, list):
            continue
        for entry in entries:
            info = entry.get("process_info", entry) if isinstance(entry, dict) else None
            if not isinstance(info, dict):
                continue
            pid = values.integer(info.get("pid"))
            if pid is not None and pid > 0:
                yield index, pid, {str(k): v for k, v in info.items()}


def attach_amd_smi_processes(
    gpus: list[GpuSample], processes: list[tuple[int, int, int | None, str | None]]
) -> list[GpuSample]:
    """Each GPU with the processes amd-smi lists on it, by amd-smi's GPU index.

    amd-smi lists a process under every GPU it holds open, and ROCm's runtime
    opens every GPU it can see: a process shows 0 bytes on the GPUs it never
    allocated on. Those entries are left out (as in worker/gpu/kfd/); an unknown
    amount is kept.
    """
    held: dict[int, list[GpuProcess]] = {g.index: [] for g in gpus}
    for index, pid, vram, name in processes:
        if index in held and vram != 0:
            held[index].append(GpuProcess(pid=pid, used_bytes=vram, name=name))
    return [msgspec.structs.replace(g, processes=held[g.index]) for g in gpus]


class AmdSmiSource(AmdToolSource):
    """AMD readings from amd-smi; processes from KFD, else from `amd-smi process`."""

    name = TOOL

    def __init__(
        self, runner: ProbeRunner, tool: str = TOOL, kfd_root: Path | str = KFD_ROOT
    ) -> None:
        super().__init__(runner, tool, kfd_root)
        self._metric_args: tuple[str, ...] = METRIC_ARGS
        self._fallbacks = [METRIC_BASIC_ARGS, METRIC_ALL_ARGS]
        self._clock = EngineClock()

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """The metric, the processes (KFD, else `amd-smi process`), and where `activity` is
        "any" and a GPU lists processes, their gfx engine time from `amd-smi process`
        (activity.py): one more run where KFD gives the processes."""
        result, gpus = await self._metric()
        if not gpus:
            error = self._printed_none(result, "GPUs", "list")
            return [], self._status(result.latency_ms, error, result.stuck)
        tree = await anyio.to_thread.run_sync(kfd.read_kfd, self._kfd_root)
        listed: ProbeResult | None = None
        if tree.gpus:
            gpus = kfd.attach_kfd_processes(gpus, tree)
        else:
            # No KFD tree to read (a container without /sys/class/kfd): ask amd-smi.
            listed = await self._runner.run([self._tool, *PROCESS_ARGS])
            if listed.error is not None and load_json(listed.stdout) is None:
                latency, stuck = result.latency_ms + listed.latency_ms, result.stuck or listed.stuck
                error = f"GPU readings only, no processes: {listed.error}"
                return gpus, self._status(latency, error, stuck)
            gpus = attach_amd_smi_processes(gpus, parse_amd_smi_processes(listed.stdout))
        if activity == "any" and any(g.processes for g in gpus):
            listed = listed or await self._runner.run([self._tool, *PROCESS_ARGS])
            entries = process_entries(listed.stdout)
            gpus = attach_engine_time(gpus, self._clock, entries, time.monotonic())
        runs = [result] if listed is None else [result, listed]
        latency = sum(r.latency_ms for r in runs)
        return gpus, self._status(latency, stuck=any(r.stuck for r in runs))

    async def _metric(self) -> tuple[ProbeResult, list[GpuSample]]:
        # amd-smi may exit non-zero over one unsupported reading and still print
        # the rest: what it printed is used.
        result = await self._runner.run([self._tool, *self._metric_args])
        gpus = parse_amd_smi(result.stdout)
        latency = result.latency_ms
        # A form that prints no GPUs may be one this build refuses: each wider one is tried
        # once, and the first that answers is kept.
        while not gpus and not result.stuck and self._fallbacks:
            args = self._fallbacks.pop(0)
            result = await self._runner.run([self._tool, *args])
            latency += result.latency_ms
            gpus = parse_amd_smi(result.stdout)
            if gpus:
                self._metric_args = args
        return dataclasses.replace(result, latency_ms=latency), gpus
