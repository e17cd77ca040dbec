"""NVIDIA GPUs through nvidia-smi's CSV queries.

Columns are read by header name, never by position: the header echoes each
field's canonical name with its unit (ask for `used_memory` and the column
reads `used_gpu_memory [MiB]`), a driver may add or rename fields, and
`--format=csv,nounits` strips units from the values only. Checked against
captures from drivers 465 to 610 (Linux and Windows) in ../shared/corpus.

Processes come from `--query-compute-apps`, one row per process per GPU,
mapped to the GPU's physical index by its UUID.

Old drivers refuse fields they do not know (a 2017-era driver has no
`mig.mode.current`): the whole query fails. The source then reads
`nvidia-smi -q -x` instead, which every driver prints, and keeps to it. The
XML is also the only place nvidia-smi lists MIG instances, so it is read
beside the CSV on a node with MIG enabled.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from dataclasses import dataclass

import msgspec

from placewatch.schemas import GpuProcess, GpuSample, SourceStatus

from ..probe import ProbeRunner
from . import SourceOptions, ToolSource, values
from .nvidia_smi_xml import parse_xml

log = logging.getLogger(__name__)

TOOL = "nvidia-smi"

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "memory.total",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "power.draw",
    "enforced.power.limit",
    "mig.mode.current",
)
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")

_GPU_KEYS = {"index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used"}
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


def gpu_query_argv(tool: str = TOOL) -> list[str]:
    return [tool, "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,nounits"]


def apps_query_argv(tool: str = TOOL) -> list[str]:
    return [tool, "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,nounits"]


def xml_argv(tool: str = TOOL) -> list[str]:
    return [tool, "-q", "-x"]


def _refused(error: str | None) -> bool:
    """Whether nvidia-smi rejected the query itself, as drivers do for unknown fields."""
    said = (error or "").lower()
    return any(
        words in said
        for words in (
            "is not a valid field",
            "invalid combination",
            "unrecognized option",
            "unknown option",
        )
    )


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
    columns = []
    for cell in header:
        match = _HEADER.match(cell.strip())
        if match is None:
            columns.append(Column(cell.strip(), None))
        else:
            columns.append(Column(match["name"].strip(), match["unit"]))
    # A line of one cell under a header of several is a message among the rows ("Unable to
    # determine the device handle for GPU0000:3B:00.0: Unknown Error"), not a row.
    rows = [row for row in rows if len(row) > 1 or len(columns) == 1]
    return columns, [_fit(columns, row) for row in rows]


def _fit(columns: list[Column], row: list[str]) -> list[str]:
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


class _Fields:
    """Where each field is in one table: a field's name differs across driver versions, so
    each lookup lists its aliases, and is worked out once per table, not once per row."""

    def __init__(self, columns: list[Column]) -> None:
        self._positions = {c.name: (i, c.unit) for i, c in enumerate(columns)}

    def at(self, *names: str) -> list[tuple[int, str | None]]:
        """The column and header unit of each of `names` the table has, in that order."""
        return [self._positions[n] for n in names if n in self._positions]


def _cell(cells: list[str], at: list[tuple[int, str | None]]) -> tuple[str | None, str | None]:
    """The first non-missing cell among the columns `at`, with its header unit."""
    for i, unit in at:
        if not values.is_missing(cells[i]):
            return cells[i], unit
    return None, None


def _text(cells: list[str], at: list[tuple[int, str | None]]) -> str | None:
    return _cell(cells, at)[0]  # cells are stripped, and _cell() skips missing ones


def _number(cells: list[str], at: list[tuple[int, str | None]]) -> float | None:
    return values.number(_cell(cells, at)[0])


def _bytes(cells: list[str], at: list[tuple[int, str | None]]) -> int | None:
    cell, unit = _cell(cells, at)
    return values.to_bytes(cell, unit or "MiB")


def parse_gpus(text: str) -> list[GpuSample]:
    """GPUs from a `--query-gpu` CSV, with or without units; never raises."""
    columns, rows = parse_table(text)
    if not {c.name for c in columns} & _GPU_KEYS:
        return []  # not a query-gpu table: an error message, or another tool's output
    f = _Fields(columns)
    index_at, uuid_at = f.at("index"), f.at("uuid", "gpu_uuid")
    name_at, bus_at = f.at("name", "gpu_name"), f.at("pci.bus_id", "gpu_bus_id")
    util_at, temp_at = f.at("utilization.gpu"), f.at("temperature.gpu")
    used_at, free_at = f.at("memory.used"), f.at("memory.free")
    total_at, reserved_at = f.at("memory.total"), f.at("memory.reserved")
    power_at = f.at("power.draw", "power.draw.instant", "power.draw.average")
    cap_at, mig_at = f.at("enforced.power.limit", "power.limit"), f.at("mig.mode.current")
    gpus = []
    for position, cells in enumerate(rows):
        index = values.integer(_cell(cells, index_at)[0])
        used = _bytes(cells, used_at)
        free = _bytes(cells, free_at)
        total = _bytes(cells, total_at)
        if total is None and used is not None and free is not None:
            # Some queries leave out memory.total; it is reserved + used + free.
            total = used + free + (_bytes(cells, reserved_at) or 0)
        # MIG-enabled GPUs report [N/A] here: the tool cannot tell.
        utilization = values.percent(_cell(cells, util_at)[0])
        gpus.append(
            GpuSample(
                index=index if index is not None and index >= 0 else position,
                uuid=_text(cells, uuid_at),
                vendor="nvidia",
                name=_text(cells, name_at),
                bus_id=_text(cells, bus_at),
                utilization_pct=utilization,
                activity="busy" if utilization is not None else None,
                memory_total_bytes=total,
                memory_used_bytes=used,
                memory_free_bytes=free,
                temperature_c=_number(cells, temp_at),
                power_w=_number(cells, power_at),
                power_cap_w=_number(cells, cap_at),
                mig_enabled=_mig_mode(_text(cells, mig_at)),
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


def _is_apps_table(text: str) -> bool:
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


class NvidiaSmiSource(ToolSource):
    """NVIDIA readings from two nvidia-smi queries a tick."""

    name = TOOL
    vendor = "nvidia"

    def __init__(self, runner: ProbeRunner, tool: str = TOOL) -> None:
        super().__init__(runner, tool)
        self._xml_only = False

    @classmethod
    def build(cls, options: SourceOptions) -> NvidiaSmiSource:
        return cls(options.runner)

    async def sample(self) -> tuple[list[GpuSample], SourceStatus]:
        if self._xml_only:
            return await self._sample_xml()
        gpu_result = await self._runner.run(gpu_query_argv(self._tool))
        if not gpu_result.ok and _refused(gpu_result.error):
            log.info("%s refused the CSV query (%s); reading -q -x instead", TOOL, gpu_result.error)
            self._xml_only = True
            return await self._sample_xml()
        gpus = parse_gpus(gpu_result.stdout)
        if not gpu_result.ok and not gpus:
            return [], self._status(gpu_result.latency_ms, gpu_result.error, gpu_result.stuck)
        # A tool that failed after printing what it could (all but a GPU it could not
        # reach) still read that: it is kept, and the failure is the status's.
        partly = [] if gpu_result.ok else [f"{gpu_result.error}; the GPUs it printed are read"]
        apps_result = await self._runner.run(apps_query_argv(self._tool))
        latency = gpu_result.latency_ms + apps_result.latency_ms
        if not apps_result.ok:
            if not _is_apps_table(apps_result.stdout):
                error = f"GPU readings only, no processes: {apps_result.error}"
                return gpus, self._status(latency, error, apps_result.stuck)
            partly.append(f"{apps_result.error}; the processes it printed are read")
        gpus = attach_processes(gpus, parse_compute_apps(apps_result.stdout))
        if not gpus:
            error = f"{TOOL} printed no GPU rows; run `{TOOL}` to see what the driver says"
            return [], self._status(latency, error)
        if any(g.mig_enabled for g in gpus):
            xml_result = await self._runner.run(xml_argv(self._tool))
            latency += xml_result.latency_ms
            gpus = attach_mig(gpus, parse_xml(xml_result.stdout) if xml_result.ok else [])
        return gpus, self._status(latency, "; ".join(partly) or None)

    async def _sample_xml(self) -> tuple[list[GpuSample], SourceStatus]:
        result = await self._runner.run(xml_argv(self._tool))
        if not result.ok:
            return [], self._status(result.latency_ms, result.error, result.stuck)
        gpus = parse_xml(result.stdout)
        if not gpus:
            error = f"{TOOL} -q -x printed no GPU; run `{TOOL} -q` to see what the driver says"
            return [], self._status(result.latency_ms, error)
        return gpus, self._status(result.latency_ms)
