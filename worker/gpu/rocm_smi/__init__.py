"""AMD GPUs through `rocm-smi --json`.

Activity is power draw over the board power cap, not the busy percentage:
amdgpu reports `GPU use (%)` near 100 whenever a compute context is resident,
even when it is idle, so a loaded model would read as a busy GPU forever.
Consumer cards (RX 6700 XT, RX 7800 XT, Vega) report `Average Graphics
Package Power`; datacenter cards (MI300X) and recent APUs (Strix Halo)
report `Current Socket Graphics Package Power`. The busy percentage is used
only where there is no power share to compute (no draw, or no cap: the
Strix Halo APU prints none). An idle card still draws its floor (idle MI100s:
35-40 W of 290 W, 12-14 %), so a share near that floor means idle, not zero.

The JSON keys change between ROCm versions (`Card series` in 4.3-6.0,
`Card Series` from 6.1; `GPU ID` became `Device ID`), Hygon's DTK build
prints its own (`DCU use (%)`, `vram Total Memory (MiB)`), and MI300X has no
edge temperature sensor, so every reading is looked up among its known
spellings. Checked against captures from ROCm 4.3 to 6.2, Hygon DTK 24.04
and a Fedora-packaged rocm-smi in ../shared/corpus/rocm-smi-json.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

import anyio.to_thread

from placewatch.schemas import GpuHealth, GpuSample, SourceStatus

from .. import ActivityWanted, AmdToolSource, kfd, values

TOOL = "rocm-smi"

# Every flag is in rocm-smi since ROCm 4.x (Telegraf's amd_rocm_smi plugin sends
# them all to 4.3-6.1; `-f` is --showfan, spelled as Telegraf does). `--showmeminfo vram`
# takes a list, ended by the next flag. Not --showbw: amdgpu's pcie_bw waits a second.
ROCM_SMI_ARGS = (
    "--showuse",
    "--showmeminfo",
    "vram",
    "--showtemp",
    "--showpower",
    "--showmaxpower",
    "--showproductname",
    "--showbus",
    "--showuniqueid",
    "--showclocks",
    "-f",
    "--showreplaycount",
    "--showmemuse",
    "--showdriverversion",
    "--json",
)

POWER_KEYS = (
    "Current Socket Graphics Package Power (W)",
    "Average Graphics Package Power (W)",
)
CAP_KEYS = ("Max Graphics Package Power (W)",)
BUSY_KEYS = ("GPU use (%)", "DCU use (%)")
NAME_KEYS = ("Card Series", "Card series", "Device Name", "Card Model", "Card model")
# The memory controller's busy share (mem_busy_percent): "GPU memory use (%)" to ROCm 6.0,
# renamed in 6.1. Not "GPU Memory Allocated (VRAM%)", 6.1's share of VRAM allocated.
MEMORY_BUSY_KEYS = ("GPU Memory Read/Write Activity (%)", "GPU memory use (%)")
SCLK_KEY = "sclk clock speed:"
MCLK_KEY = "mclk clock speed:"
FAN_KEY = "Fan speed (%)"
REPLAY_KEY = "PCIe Replay Count"
PCIE_KEY = "pcie clock level"

# AMD's PCI vendor id: ROCm 4.3 printed it in every "Card ..." field (RX 6700 XT capture).
_AMD_VENDOR_ID = "0x1002"

_CARD = re.compile(r"^(?:card(\d+)|GPU\[(\d+)\])$")
_TEMPERATURE = re.compile(r"^Temperature \(Sensor (?P<sensor>[^)]+)\) \(C\)$")
_VRAM = re.compile(r"^vram total (?P<used>used )?memory \((?P<unit>[a-z]+)\)$", re.IGNORECASE)
_HEX_ID = re.compile(r"^-?0x[0-9a-f]+$", re.IGNORECASE)
# "(1200Mhz)"; the PCIe DPM level in force: "1 (16.0GT/s x16)".
_CLOCK = re.compile(r"^\s*\(?\s*(\d+(?:\.\d+)?)\s*Mhz\s*\)?\s*$", re.IGNORECASE)
_PCIE_LEVEL = re.compile(r"\((\d+(?:\.\d+)?)\s*GT/s\s+x(\d+)\)")
_PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

# Edge first, as on consumer cards; MI300X has no edge sensor, so junction
# (rocm-smi's name for the hotspot), then the memory sensor (Hygon says "mem").
_SENSORS = (
    ("edge", "edge"),
    ("junction", "junction"),
    ("hotspot", "junction"),
    ("memory", "memory"),
    ("mem", "memory"),
)


def power_activity(
    power_w: float | None, cap_w: float | None, busy_pct: float | None
) -> tuple[float | None, Literal["busy", "power"] | None]:
    """Utilization and how it was derived: power over cap where both are known, else busy.
    The share is clamped before it is rounded: a draw near float's limit over a small cap
    (a hostile or broken tool's output) is infinite, which round() refuses."""
    if power_w is not None and cap_w is not None and cap_w > 0:
        return float(round(min(100.0, max(0.0, power_w * 100 / cap_w)))), "power"
    if busy_pct is not None:
        return busy_pct, "busy"
    return None, None


def amd_sample(
    index: int,
    *,
    power: float | None,
    cap: float | None,
    busy: float | None,
    total: int | None,
    used: int | None,
    free: int | None = None,
    temperature: float | None,
    sensor: str | None,
    **readings: Any,
) -> GpuSample:
    """An AMD GPU's sample as both AMD tools read it: a cap of 0 W or less is no cap (the
    driver saying it has none; amd-smi's `static --limit` prints 0 W then), utilization is
    power over cap where both are known, else the busy share (power_activity), and free
    memory is total less used where the tool prints none. `readings`: the rest, by name."""
    if cap is not None and cap <= 0:
        cap = None
    utilization, activity = power_activity(power, cap, busy)
    if free is None and total is not None and used is not None and used <= total:
        free = total - used
    return GpuSample(
        index=index,
        vendor="amd",
        utilization_pct=utilization,
        activity=activity,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_free_bytes=free,
        temperature_c=temperature,
        temperature_sensor=sensor,
        power_w=power,
        power_cap_w=cap,
        **readings,
    )


def load_json(text: str) -> object:
    """The JSON document in a tool's output, or None.

    Some rocm-smi and amd-smi builds print a blank line or a warning (missing
    render group, an unlocked monitor lock) before the document, so parsing
    starts again at each line that opens an object or a list.
    """
    decoder = json.JSONDecoder()
    offset = 0
    tries = 0
    for line in text.splitlines(keepends=True):
        start = offset + len(line) - len(line.lstrip())
        offset += len(line)
        if not line.lstrip().startswith(("{", "[")):
            continue
        tries += 1
        try:
            document, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            if tries >= 20:
                return None
            continue
        return document
    return None


def _card_index(key: str) -> int | None:
    match = _CARD.match(key.strip())
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def _first(card: Mapping[str, object], keys: tuple[str, ...]) -> object:
    for key in keys:
        value = card.get(key)
        if not values.is_missing(value):
            return value
    return None


def _name(card: Mapping[str, object]) -> str | None:
    """The marketing name; a bare PCI id only where the card prints nothing better."""
    found = [values.text(card.get(key)) for key in NAME_KEYS]
    names = [n for n in found if n is not None]
    for name in names:
        if not _HEX_ID.match(name):
            return name
    for name in names:
        if name.lower() != _AMD_VENDOR_ID:
            return name  # Vega 10 XT, driver 5.9.25: "Card model" 0xc1e is all it prints
    return None


def _temperature(card: Mapping[str, object]) -> tuple[float | None, str | None]:
    readings: dict[str, float] = {}
    for key, value in card.items():
        match = _TEMPERATURE.match(key)
        reading = values.number(value)
        if match is not None and reading is not None:
            readings.setdefault(match["sensor"].strip().lower(), reading)
    for sensor, label in _SENSORS:
        if sensor in readings:
            return readings[sensor], label
    return None, None


def _vram(card: Mapping[str, object]) -> tuple[int | None, int | None]:
    total: int | None = None
    used: int | None = None
    for key, value in card.items():
        match = _VRAM.match(key)
        if match is None:
            continue
        amount = values.to_bytes(value, match["unit"])
        if match["used"]:
            used = used if used is not None else amount
        else:
            total = total if total is not None else amount
    return total, used


def _mhz(value: object) -> int | None:
    match = _CLOCK.match(value) if isinstance(value, str) else None
    return None if match is None else _count(match[1])


def _count(value: object) -> int | None:
    found = values.integer(value)
    return found if found is not None and 0 <= found < 2**63 else None


def _health(card: Mapping[str, object]) -> GpuHealth | None:
    """The PCIe link in force and its replays: all of GpuHealth that rocm-smi's captures
    show (its ECC and retired-page readings are text tables, not in --json)."""
    level = card.get(PCIE_KEY)
    match = _PCIE_LEVEL.search(level) if isinstance(level, str) else None
    health = GpuHealth(
        pcie_gen=None if match is None else _PCIE_GENERATIONS.get(float(match[1])),
        pcie_width=None if match is None else _count(match[2]),
        pcie_replays=_count(card.get(REPLAY_KEY)),
    )
    return None if health == GpuHealth() else health


def _card(index: int, card: Mapping[str, object], driver: str | None) -> GpuSample:
    temperature, sensor = _temperature(card)
    total, used = _vram(card)
    return amd_sample(
        index,
        power=values.number(_first(card, POWER_KEYS)),
        cap=values.number(_first(card, CAP_KEYS)),
        busy=values.percent(_first(card, BUSY_KEYS)),
        total=total,
        used=used,
        temperature=temperature,
        sensor=sensor,
        uuid=values.text(card.get("Unique ID")),
        name=_name(card),
        bus_id=values.text(card.get("PCI Bus")),
        sm_clock_mhz=_mhz(card.get(SCLK_KEY)),
        memory_clock_mhz=_mhz(card.get(MCLK_KEY)),
        memory_util_pct=values.percent(_first(card, MEMORY_BUSY_KEYS)),
        fan_pct=values.percent(card.get(FAN_KEY)),
        driver_version=driver,
        health=_health(card),
    )


def parse_rocm_smi(text: str) -> list[GpuSample]:
    """One GpuSample per `cardN` / `GPU[N]` entry, in index order; never raises."""
    document = load_json(text)
    if not isinstance(document, dict):
        return []
    system = document.get("system")  # the driver's version, topology, --showpids
    driver = values.text(system.get("Driver version")) if isinstance(system, dict) else None
    cards: dict[int, GpuSample] = {}
    for key, card in document.items():
        index = _card_index(str(key))
        if index is None or index in cards or not isinstance(card, dict):
            continue  # "system" (driver version, topology, --showpids) and odd keys
        cards[index] = _card(index, {str(k): v for k, v in card.items()}, driver)
    return [cards[i] for i in sorted(cards)]


class RocmSmiSource(AmdToolSource):
    """AMD readings from one rocm-smi call a tick, processes from the KFD sysfs tree."""

    name = TOOL

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """The cards and their KFD processes. `activity` changes nothing: rocm-smi's JSON has
        no per-process utilization (its --showpids CU occupancy is a text table)."""
        result = await self._runner.run([self._tool, *ROCM_SMI_ARGS])
        # rocm-smi exits non-zero when one of the asked readings is unsupported on
        # the card, and still prints the others: what it printed is used.
        gpus = parse_rocm_smi(result.stdout)
        if not gpus:
            error = self._printed_none(result, "cards", "--showproductname --json")
            return [], self._status(result.latency_ms, error, result.stuck)
        tree = await anyio.to_thread.run_sync(kfd.read_kfd, self._kfd_root)
        return kfd.attach_kfd_processes(gpus, tree), self._status(
            result.latency_ms, stuck=result.stuck
        )
