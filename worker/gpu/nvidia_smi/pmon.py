"""What each process ran on each NVIDIA GPU, from `nvidia-smi pmon -c 1 -s u`.

Where NVML cannot be loaded in process, nvidia-smi's process monitor is the tool's way to
the same per-process samples. It prints two header lines, names and units, then a row per
process per GPU (its type C, G or C+G, and a process with both contexts may have one row of
each), and a row of `-` for a GPU with no process:

    # gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
    # Idx           #    C/G      %      %      %      %      %      %    name
        0    2354247     C     37      4      -      -      -      -    tritonserver
        1          -     -      -      -      -      -      -      -    -

Drivers before the jpg/ofa engines (R52x and older) print `gpu pid type sm mem enc dec
command`; `-s um` adds `fb` and `ccpm`. Columns are read by the header's names, never by
position, and the command, which may hold spaces, is the rest of the row. A `-` is a value
the tool did not give: None, never 0. The header and row layout follow NVIDIA's
`nvidia-smi pmon` documentation and outputs published from drivers 535 to 580.
"""

from __future__ import annotations

from typing import NamedTuple

from placewatch.schemas import GpuSample
from placewatch.schemas.messages import PID_MAX

from .. import values
from ..process_activity import NO_READING, Usage, attach_usage

TOOL = "nvidia-smi"
PMON_ARGS = ("pmon", "-c", "1", "-s", "u")
"""One sample (-c 1) of utilization (-s u): SM, memory controller, encoder, decoder."""


def pmon_argv(tool: str = TOOL) -> list[str]:
    return [tool, *PMON_ARGS]


class PmonRow(NamedTuple):
    """One row: a process on a GPU (a NamedTuple: 64 of them a tick are cheap to make)."""

    gpu: int
    pid: int
    sm_pct: float | None
    mem_pct: float | None
    kind: str | None
    """C (compute), G (graphics), C+G, or None where `-`."""
    command: str | None


def _header(line: str) -> list[str] | None:
    """The column names of a `# gpu pid type ...` line, or None for any other line."""
    if not line.startswith("#"):
        return None
    names = line[1:].split()
    return names if "gpu" in names and "pid" in names else None


def parse_pmon(text: str) -> list[PmonRow]:
    """Every process row of `nvidia-smi pmon` output; never raises. Rows before the header,
    rows whose gpu or pid is not a number (an idle GPU's `-` row, an error message) and
    rows with fewer cells than the header are skipped."""
    columns: _Columns | None = None
    rows = []
    for line in text.splitlines():
        if line.startswith("#"):
            header = _header(line)
            if header is not None and columns is None:
                columns = _Columns(header)
            continue
        if columns is not None:
            row = columns.row(line.split())
            if row is not None:
                rows.append(row)
    return rows


class _Columns:
    """Where each read column is in the header's names; worked out once per output."""

    def __init__(self, names: list[str]) -> None:
        self.fixed = len(names) - 1 if names[-1] == "command" else len(names)
        where = {name: i for i, name in enumerate(names[: self.fixed])}
        self.gpu, self.pid = where["gpu"], where["pid"]
        self.type, self.sm, self.mem = where.get("type"), where.get("sm"), where.get("mem")

    def row(self, cells: list[str]) -> PmonRow | None:
        if len(cells) < self.fixed:
            return None
        gpu, pid = cells[self.gpu], cells[self.pid]
        if not (gpu.isascii() and gpu.isdigit() and pid.isascii() and pid.isdigit()):
            return None
        if not 0 < int(pid) <= PID_MAX:
            return None
        kind = None if self.type is None else cells[self.type]
        command = " ".join(cells[self.fixed :])
        return PmonRow(
            int(gpu),
            int(pid),
            _pct(cells, self.sm),
            _pct(cells, self.mem),
            None if kind in (None, "-") else kind,
            None if command in ("", "-") else command,
        )


def _pct(cells: list[str], at: int | None) -> float | None:
    if at is None or cells[at] == "-":  # the common no-value: no number parse
        return None
    return values.percent(cells[at])


def pmon_usage(rows: list[PmonRow]) -> dict[int, dict[int, Usage]]:
    """GPU index -> pid -> (SM %, memory %), a process's rows on one GPU added up (its
    compute and graphics contexts); None where none of its rows gave the value."""
    found: dict[int, dict[int, Usage]] = {}
    for row in rows:
        per_gpu = found.setdefault(row.gpu, {})
        sm, mem = per_gpu.get(row.pid, NO_READING)
        per_gpu[row.pid] = (_add(sm, row.sm_pct), _add(mem, row.mem_pct))
    return found


def _add(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return b if a is None else a
    return a + b


def attach_pmon(gpus: list[GpuSample], rows: list[PmonRow]) -> list[GpuSample]:
    """Each GPU's processes with what pmon says they ran.

    A process pmon gives no SM sample for (`-`, or no row) is one the driver had no sample
    of: on a GPU whose own utilization in the same read is 0, no process ran kernels, so it
    is 0; anywhere else that says nothing (the GPU may not support per-process samples), so
    it stays None.
    """
    usage = pmon_usage(rows)
    out = []
    for gpu in gpus:
        idle_gpu = gpu.utilization_pct == 0
        listed = usage.get(gpu.index, {})
        filled = {
            pid: (0.0 if sm is None and idle_gpu else sm, mem) for pid, (sm, mem) in listed.items()
        }
        out.append(attach_usage(gpu, filled, (0.0, None) if idle_gpu else NO_READING))
    return out
