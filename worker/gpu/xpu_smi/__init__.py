"""Intel data-center GPUs (Max, Flex) through `xpu-smi`, the CLI of intel/xpumanager.

xpu-smi starts Level Zero's Sysman at every run (most of a second), so what stays is read
once: the devices (`discovery -j`) and each one's memory size and driver (`discovery -d N
-j`), looked for again when the dump no longer lists them. Each tick is one `xpu-smi dump`
of every device for one pass: it waits 0.9 s of its 1 s interval before printing (1.3.7
cli/src/comlet_dump.cpp), the shortest a pass takes. 1.3.x takes `-m -i -n`, 2.0.0
`--metrics --interval --number`: the first that prints a reading is kept.

Per-process memory is not read from xpu-smi: `xpu-smi ps` counts it wrongly on client cards
(intel/xpumanager#145), and xpu-smi sees data-center GPUs only. Every other Intel GPU (Arc,
Battlemage, integrated) is read from sysfs (worker/gpu/intel_sysfs/), the next source in
the registry's order.
"""

from __future__ import annotations

from typing import ClassVar, Self

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.schemas.messages import Vendor

from ...probe import ProbeResult, ProbeRunner
from .. import ActivityWanted, SourceOptions, ToolSource, values
from .parse import (
    DUMP_METRICS,
    XpuDevice,
    XpuProperties,
    memory_used_bytes,
    parse_discovery,
    parse_dump,
    parse_properties,
    tool_error,
)

TOOL = "xpu-smi"

DUMP_FORMS: tuple[tuple[str, ...], ...] = (
    ("-m", DUMP_METRICS, "-i", "1", "-n", "1"),
    ("--metrics", DUMP_METRICS, "--interval", "1", "--number", "1"),
)
"""One pass of the dump, as 1.3.x (`-m`, `-i`, `-n`) and 2.0.0 (`--metrics`, `--interval`,
`--number`) spell it."""

ADVICE = (
    "run `xpu-smi discovery` to see what it says, and check that the i915 or xe driver is "
    "loaded (lsmod | grep -e i915 -e xe), that Level Zero is installed, and that this user "
    "is in the render and video groups; xpu-smi reads data-center GPUs only (Max, Flex): "
    "Arc and integrated GPUs are read through intel-sysfs"
)


def intel_sample(
    device: XpuDevice, properties: XpuProperties, readings: dict[str, float]
) -> GpuSample:
    """A device's sample: what discovery said it is, what the dump read now. Free memory is
    the physical size less what is used (xpu-smi 1.3.7's dump prints no free memory)."""
    total, used = properties.memory_total_bytes, memory_used_bytes(readings)
    free = total - used if total is not None and used is not None and used <= total else None
    utilization = values.percent(readings.get("utilization_pct"))
    return GpuSample(
        index=device.device_id,
        vendor="intel",
        uuid=device.uuid,
        name=device.name,
        bus_id=device.bus_id,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_free_bytes=free,
        utilization_pct=utilization,
        activity=None if utilization is None else "busy",
        temperature_c=readings.get("temperature_c"),
        memory_temperature_c=readings.get("memory_temperature_c"),
        power_w=readings.get("power_w"),
        energy_j=readings.get("energy_j"),
        sm_clock_mhz=values.count(readings.get("sm_clock_mhz")),
        memory_util_pct=values.percent(readings.get("memory_util_pct")),
        driver_version=properties.driver_version,
        temperature_sensor="core" if "temperature_c" in readings else None,
    )


class XpuSmiSource(ToolSource):
    """Intel GPU readings from xpu-smi: discovery once, a dump a tick."""

    name: ClassVar[str] = TOOL
    vendor: ClassVar[Vendor] = "intel"

    def __init__(self, runner: ProbeRunner, tool: str = TOOL) -> None:
        super().__init__(runner, tool)
        self._devices: list[XpuDevice] = []
        self._properties: dict[int, XpuProperties] = {}
        self._forms = list(DUMP_FORMS)

    @classmethod
    def build(cls, options: SourceOptions) -> Self:
        return cls(options.runner)

    def unavailable(self) -> str | None:
        if super().unavailable() is None:
            return None
        return (
            f"{self._tool} not found on PATH: for utilization and memory in use of Intel "
            "data-center GPUs (Max, Flex), install intel/xpumanager's xpu-smi package; every "
            "Intel GPU is read from sysfs (intel-sysfs) without it"
        )

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """This tick's dump of the devices known (found first where none is); `activity` is
        not used: xpu-smi's per-process figures are not read (module doc)."""
        runs: list[ProbeResult] = []
        if not self._devices:
            await self._discover(runs)
        if not self._devices:
            return [], self._ended(runs, self._printed_none(runs))
        readings = await self._dump(runs)
        if not readings:
            self._devices = []  # a device gone, or the tool broken: discovery again next tick
            said = runs[-1].error or tool_error(runs[-1].stdout) or "it printed no reading"
            return [], self._ended(runs, f"`xpu-smi dump` read no GPU ({said}); {ADVICE}")
        gpus = [
            intel_sample(d, self._properties.get(d.device_id, XpuProperties()), found)
            for d in self._devices
            if (found := readings.get(d.device_id)) is not None
        ]
        if len(gpus) < len(self._devices):
            self._devices = []  # one the dump no longer lists: discovery again next tick
        return gpus, self._ended(runs)

    async def _discover(self, runs: list[ProbeResult]) -> None:
        """The devices, and the properties of each not read before."""
        listed = await self._runner.run([self._tool, "discovery", "-j"])
        runs.append(listed)
        self._devices = parse_discovery(listed.stdout)
        for device in self._devices:
            if device.device_id in self._properties:
                continue
            result = await self._runner.run(
                [self._tool, "discovery", "-d", str(device.device_id), "-j"]
            )
            runs.append(result)
            if result.stuck:
                return
            properties = parse_properties(result.stdout)
            if properties != XpuProperties():
                self._properties[device.device_id] = properties

    async def _dump(self, runs: list[ProbeResult]) -> dict[int, dict[str, float]]:
        """One pass of the dump, in the form this xpu-smi takes (each tried until one reads)."""
        ids = ",".join(str(d.device_id) for d in self._devices)
        while self._forms:
            result = await self._runner.run([self._tool, "dump", "-d", ids, *self._forms[0]])
            runs.append(result)
            readings = parse_dump(result.stdout)
            if readings or result.stuck or len(self._forms) == 1:
                return readings
            self._forms.pop(0)  # this version refuses the form: the next one, kept if it reads
        return {}

    def _printed_none(self, runs: list[ProbeResult]) -> str:
        """Why discovery found no GPU: the tool's failure, its JSON error, or what to check."""
        last = runs[-1]
        said = tool_error(last.stdout)
        if said is None and last.error is not None and not last.stdout.strip():
            return last.error
        return f"xpu-smi listed no GPU ({said or last.error or 'an empty device list'}); {ADVICE}"

    def _ended(self, runs: list[ProbeResult], error: str | None = None) -> SourceStatus:
        latency = sum(r.latency_ms for r in runs)
        return self._status(latency, error, any(r.stuck for r in runs))
