"""nvidia-smi's CSV answers (`--query-gpu`, `--query-compute-apps`), parsed; pure.

Columns are read by header name, never by position: the header echoes each
field's canonical name with its unit (ask for `used_memory` and the column
reads `used_gpu_memory [MiB]`), a driver may add or rename fields, and
`--format=csv,nounits` strips units from the values only. Checked against
captures from drivers 465 to 610 (Linux and Windows) in ../shared/corpus.
Nothing here raises on bad text: what cannot be read is left out or None.

Health (GpuHealth) is read from whichever of its columns a table has; `healthy` and
`problems` are left to worker/gpu/health.py. Names moved between drivers: the clock event columns
print as `clocks_throttle_reasons.*` through R470 (RTX 2080 SUPER at 465 and 471) and as
`clocks_event_reasons.*` from R535 (every 590+ capture), whichever name was asked; the
mask (`.active`) is read first, the per-reason "Active" columns where a table has no mask.
`pcie.link.gen.current` (every driver) is read before `pcie.link.gen.gpucurrent` (recent
drivers, which call `current` deprecated): both are the link's current generation, equal
in every capture, and `current` is what the XML's `<current_link_gen>` prints too.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from placewatch.schemas import GpuHealth, GpuProcess, GpuSample
from placewatch.schemas.health import CLOCK_EVENT_BITS

from .. import recovery, values
from ..clock_events import active, clock_event_names, parse_mask

GPU_KEYS = {"index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used"}
"""Columns of which a `--query-gpu` table has at least one."""
T = TypeVar("T")
HEALTH_KEPT = 64
"""Sets of health cells a table remembers: a few a GPU (its clock events change)."""
_HEADER = re.compile(r"^(?P<name>[^\[]+?)\s*(?:\[(?P<unit>[^\]]*)\])?$")


@dataclass(frozen=True)
class Column:
    name: str
    unit: str | None


@dataclass(frozen=True)
class ComputeApp:
    gpu_uuid: str | None
    pid: int
    name: str | None
    used_bytes: int | None


def attach_mig(gpus: list[GpuSample], from_xml: list[GpuSample]) -> list[GpuSample]:
    """MIG instances read from the XML, put on the CSV's GPUs by UUID."""
    instances = {g.uuid: g.mig for g in from_xml if g.uuid and g.mig}
    return [
        msgspec.structs.replace(g, mig=instances[g.uuid]) if g.uuid in instances else g
        for g in gpus
    ]


def parse_table(text: str) -> tuple[list[Column], list[list[str]]]:
    """The header columns and rows of a CSV query; empty when there is no header."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return [], []
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    try:
        header, *rows = list(reader)
    except csv.Error:
        return [], []
    columns = [_column(cell) for cell in header]
    # A line of one cell under a header of several is a message among the rows ("Unable to
    # determine the device handle for GPU0000:3B:00.0: Unknown Error"), not a row.
    rows = [row for row in rows if len(row) > 1 or len(columns) == 1]
    return columns, [fit_row(columns, row) for row in rows]


@functools.lru_cache(maxsize=512)
def _column(cell: str) -> Column:
    """A header cell read as its field's name and unit ("memory.used [MiB]")."""
    match = _HEADER.match(cell.strip())
    if match is None:
        return Column(cell.strip(), None)
    return Column(match["name"].strip(), match["unit"])


def fit_row(columns: list[Column], row: list[str]) -> list[str]:
    """A row with as many cells as the header.

    nvidia-smi does not quote, so a process name holding ", " (a Windows path)
    spills into the next cells: those are joined back into `process_name`.
    """
    extra = len(row) - len(columns)
    names = [c.name for c in columns] if extra > 0 else []
    if "process_name" in names:
        at = names.index("process_name")
        row = [*row[:at], ", ".join(row[at : at + extra + 1]), *row[at + extra + 1 :]]
    if len(row) < len(columns):
        row = row + [""] * (len(columns) - len(row))
    return [cell.strip() for cell in row[: len(columns)]]


_At = list[tuple[int, str | None]]
"""A field's columns in one table, with their header units: the first that reads wins."""


class _Fields:
    """Where each field is in one table: a field's name differs across driver versions, so
    each lookup lists its aliases, and is worked out once per table, not once per row."""

    def __init__(self, columns: list[Column]) -> None:
        self._positions = {c.name: (i, c.unit) for i, c in enumerate(columns)}

    def at(self, *names: str) -> _At:
        """The column and header unit of each of `names` the table has, in that order."""
        return [self._positions[n] for n in names if n in self._positions]


def _cell(cells: list[str], at: _At) -> tuple[str | None, str | None]:
    """The first non-missing cell among the columns `at`, with its header unit."""
    for i, unit in at:
        if not values.is_missing(cells[i]):
            return cells[i], unit
    return None, None


def _text(cells: list[str], at: _At) -> str | None:
    return _cell(cells, at)[0]  # cells are stripped, and _cell() skips missing ones


def _first(cells: list[str], at: _At, read: Callable[[str], T]) -> T | None:
    """The first of the columns `at` that `read` makes a reading of (every spelling of a
    missing reading is None to it); None when none does."""
    for i, _ in at:
        reading = read(cells[i])
        if reading is not None:
            return reading
    return None


def _number(cells: list[str], at: _At) -> float | None:
    return _first(cells, at, values.number)


def _bytes(cells: list[str], at: _At) -> int | None:
    for i, unit in at:
        size = values.to_bytes(cells[i], unit or "MiB")
        if size is not None:
            return size
    return None


class _HealthColumns:
    """Where one table's health readings are, each with its aliases across drivers."""

    def __init__(self, f: _Fields) -> None:
        self.sm = f.at("clocks.current.sm", "clocks.sm")
        self.mem_clock = f.at("clocks.current.memory", "clocks.mem")
        self.mem_util, self.fan = f.at("utilization.memory"), f.at("fan.speed")
        counts = {
            f"ecc_{kind}_{span}": f.at(f"ecc.errors.{kind}.{span}.total")
            for kind in ("corrected", "uncorrected")
            for span in ("volatile", "aggregate")
        }
        counts |= {
            "retired_pages_sbe": f.at("retired_pages.single_bit_ecc.count", "retired_pages.sbe"),
            "retired_pages_dbe": f.at("retired_pages.double_bit.count", "retired_pages.dbe"),
            "remapped_rows_correctable": f.at("remapped_rows.correctable"),
            "remapped_rows_uncorrectable": f.at("remapped_rows.uncorrectable"),
            "pcie_gen": f.at("pcie.link.gen.current", "pcie.link.gen.gpucurrent"),
            "pcie_width": f.at("pcie.link.width.current"),
        }
        flags = {
            "retired_pages_pending": f.at("retired_pages.pending"),
            "remapped_rows_pending": f.at("remapped_rows.pending"),
            "remapped_rows_failed": f.at("remapped_rows.failure"),
        }
        # Only the columns this table has: a row is read once per pass.
        self.counts = [(k, at) for k, at in counts.items() if at]
        self.flags = [(k, at) for k, at in flags.items() if at]
        self.action = f.at("gpu_recovery_action")
        self.reset = f.at("reset_status.reset_required")
        self.drain = f.at("reset_status.drain_and_reset_recommended")
        self.mask = f.at("clocks_event_reasons.active", "clocks_throttle_reasons.active")
        self.reasons = {
            name: f.at(f"clocks_event_reasons.{name}", f"clocks_throttle_reasons.{name}")
            for name in CLOCK_EVENT_BITS.values()
        }
        read = [at for _, at in (*self.counts, *self.flags)] + [*self.reasons.values()]
        read += [self.action, self.reset, self.drain, self.mask]
        self._cells = sorted({i for at in read for i, _ in at})
        """Every cell `health` reads."""
        self._known: dict[tuple[str, ...], tuple[GpuHealth | None]] = {}

    def health(self, cells: list[str]) -> GpuHealth | None:
        """The health readings of one row; None when the row has none of them.

        The counts and flags stay the same for months, so a looping query prints the same
        health cells pass after pass, GPU after GPU: each set of cells is read once (the
        costliest part of a row: every count, the recovery action, the clock events) and
        its GpuHealth, frozen, given again."""
        key = tuple([cells[i] for i in self._cells])
        known = self._known.get(key)  # one lookup: another thread may clear it meanwhile
        if known is not None:
            return known[0]
        if len(self._known) >= HEALTH_KEPT:
            self._known.clear()  # a GPU whose events flap: start over rather than grow
        found = self._read(cells)
        self._known[key] = (found,)
        return found

    def _read(self, cells: list[str]) -> GpuHealth | None:
        counts = {k: _first(cells, at, values.count) for k, at in self.counts}
        flags = {k: _first(cells, at, values.flag) for k, at in self.flags}
        # "None" is the action's word, not a missing cell: read before _cell() would skip it.
        said = next((cells[i] for i, _ in self.action), None)
        action = recovery.from_words(said)
        if action is None and (self.reset or self.drain):
            action = recovery.from_flags(
                _first(cells, self.reset, values.flag), _first(cells, self.drain, values.flag)
            )
        events = self._clock_events(cells)
        if (
            events is None
            and action is None
            and all(v is None for v in (*counts.values(), *flags.values()))
        ):
            return None
        return msgspec.structs.replace(
            GpuHealth(clock_events=events or [], recovery_action=action), **counts, **flags
        )

    def _clock_events(self, cells: list[str]) -> list[str] | None:
        mask = parse_mask(_cell(cells, self.mask)[0])
        if mask is not None:
            return clock_event_names(mask)
        states = {name: active(_cell(cells, at)[0]) for name, at in self.reasons.items()}
        if all(state is None for state in states.values()):
            return None
        return [name for name, state in states.items() if state]  # in the mask's bit order


class _GpuColumns:
    """Where one `--query-gpu` table's readings are: worked out once per header, which a
    looping query prints once and every pass reuses."""

    def __init__(self, columns: tuple[Column, ...]) -> None:
        f = _Fields(list(columns))
        self.index, self.uuid = f.at("index"), f.at("uuid", "gpu_uuid")
        self.name, self.bus = f.at("name", "gpu_name"), f.at("pci.bus_id", "gpu_bus_id")
        self.util, self.temp = f.at("utilization.gpu"), f.at("temperature.gpu")
        self.used, self.free = f.at("memory.used"), f.at("memory.free")
        self.total, self.reserved = f.at("memory.total"), f.at("memory.reserved")
        self.power = f.at("power.draw", "power.draw.instant", "power.draw.average")
        self.cap, self.mig = f.at("enforced.power.limit", "power.limit"), f.at("mig.mode.current")
        self.memory_temp = f.at("temperature.memory")
        self.encoder, self.decoder = f.at("utilization.encoder"), f.at("utilization.decoder")
        self.driver = f.at("driver_version")
        self.health = _HealthColumns(f)


@functools.lru_cache(maxsize=16)
def _gpu_columns(columns: tuple[Column, ...]) -> _GpuColumns:
    return _GpuColumns(columns)


def parse_gpus(text: str) -> list[GpuSample]:
    """GPUs from a `--query-gpu` CSV, with or without units; never raises."""
    return gpus_of(*parse_table(text))


def gpus_of(columns: list[Column], rows: list[list[str]]) -> list[GpuSample]:
    """GPUs from a `--query-gpu` table's header and rows, each row as parse_table gives it
    (fit_row: as wide as the header, its cells stripped); never raises."""
    if not {c.name for c in columns} & GPU_KEYS:
        return []  # not a query-gpu table: an error message, or another tool's output
    at = _gpu_columns(tuple(columns))
    health = at.health
    gpus = []
    for position, cells in enumerate(rows):
        index = _first(cells, at.index, values.integer)
        used = _bytes(cells, at.used)
        free = _bytes(cells, at.free)
        total = _bytes(cells, at.total)
        reserved = _bytes(cells, at.reserved)
        if total is None and used is not None and free is not None:
            # Some queries leave out memory.total; it is reserved + used + free.
            total = used + free + (reserved or 0)
        elif reserved is None and total is not None and used is not None and free is not None:
            reserved = max(total - used - free, 0)  # R510 and later: total = reserved + ...
        # MIG-enabled GPUs report [N/A] here: the tool cannot tell.
        utilization = _first(cells, at.util, values.percent)
        gpus.append(
            GpuSample(
                index=index if index is not None and index >= 0 else position,
                uuid=_text(cells, at.uuid),
                vendor="nvidia",
                name=_text(cells, at.name),
                bus_id=_text(cells, at.bus),
                utilization_pct=utilization,
                activity="busy" if utilization is not None else None,
                memory_total_bytes=total,
                memory_used_bytes=used,
                memory_free_bytes=free,
                temperature_c=_number(cells, at.temp),
                power_w=_number(cells, at.power),
                power_cap_w=_number(cells, at.cap),
                mig_enabled=_mig_mode(_text(cells, at.mig)),
                sm_clock_mhz=_first(cells, health.sm, values.count),
                memory_clock_mhz=_first(cells, health.mem_clock, values.count),
                memory_util_pct=_first(cells, health.mem_util, values.percent),
                fan_pct=_first(cells, health.fan, values.percent),
                memory_reserved_bytes=reserved,
                memory_temperature_c=_number(cells, at.memory_temp),
                encoder_util_pct=_first(cells, at.encoder, values.percent),
                decoder_util_pct=_first(cells, at.decoder, values.percent),
                driver_version=_text(cells, at.driver),
                health=health.health(cells),
            )
        )
    return gpus


def _mig_mode(value: str | None) -> bool | None:
    if value is None:
        return None
    return {"enabled": True, "disabled": False}.get(value.lower())


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """Processes from a `--query-compute-apps` CSV; rows without a pid are skipped."""
    columns, rows = parse_table(text)
    if "pid" not in {c.name for c in columns}:
        return []
    f = _Fields(columns)
    pid_at, uuid_at = f.at("pid"), f.at("gpu_uuid", "uuid")
    name_at, used_at = f.at("process_name", "name"), f.at("used_gpu_memory", "used_memory")
    apps = []
    for cells in rows:
        pid = values.integer(_cell(cells, pid_at)[0])
        if pid is None or pid < 0:
            continue
        apps.append(
            ComputeApp(
                gpu_uuid=_text(cells, uuid_at),
                pid=pid,
                name=_text(cells, name_at),
                # WDDM (Windows) drivers print [N/A] for every process.
                used_bytes=_bytes(cells, used_at),
            )
        )
    return apps


def is_apps_table(text: str) -> bool:
    """Whether `text` holds a --query-compute-apps table, its rows however many."""
    columns, _ = parse_table(text)
    return any(c.name == "pid" for c in columns)


def attach_processes(gpus: list[GpuSample], apps: list[ComputeApp]) -> list[GpuSample]:
    """Each GPU with the processes the compute-apps query lists on it, matched by UUID."""
    by_uuid: dict[str, list[GpuProcess]] = {g.uuid: [] for g in gpus if g.uuid}
    for app in apps:
        if app.gpu_uuid in by_uuid:
            by_uuid[app.gpu_uuid].append(
                GpuProcess(pid=app.pid, used_bytes=app.used_bytes, name=app.name)
            )
    return [
        msgspec.structs.replace(g, processes=by_uuid[g.uuid]) if g.uuid in by_uuid else g
        for g in gpus
    ]
