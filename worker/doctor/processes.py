"""Whether this worker sees the GPU processes in its /proc and may read the engines' entries.

The driver lists host PIDs: a worker in a container without the host's PID
namespace finds none of them in its /proc, and would see every shard hold
nothing. A /proc mounted with `hidepid=` hides other users' processes from a
worker that is not root in the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from placewatch.schemas import GpuSample

from ..shards.discover import Discovered
from .report import Report, count

PROCESSES = "shard processes"

HOST_PID_NAMESPACE = (
    "run the worker with the host's PID namespace (docker run --pid=host / pid: host)"
)
AS_ENGINE_USER = "run the worker as root or as the engines' user"


def check_processes(
    gpus: Sequence[GpuSample],
    found: Sequence[Discovered],
    report: Report,
    proc: Path = Path("/proc"),
) -> None:
    """Whether this worker sees the GPU processes in its /proc and may read the engines' entries.

    Discovery reads an engine's command line and environment (its device
    mask); a GPU process that is no engine needs only its command line (a
    placement's `match`), so a root-owned X server does not count against a
    worker that is not root.
    """
    listed: dict[int, str] = {}
    for g in gpus:
        for p in g.processes:
            listed.setdefault(p.pid, f"{g.vendor} GPU {g.index}")
    engines = {d.spec.pid: d.spec.id for d in found if d.spec.pid is not None}
    if not listed and not engines:
        report.skip(PROCESSES, "no engine process found and no GPU process listed by the tools")
        return
    hidden = sorted(pid for pid in listed if not (proc / str(pid)).exists())
    denied = _unreadable_entries(listed, engines, hidden, proc)
    if hidden:
        _report_hidden_processes(report, hidden, listed, proc)
    if denied:
        report.fail(
            PROCESSES,
            f"may not read /proc/PID of {count(len(denied), 'process', 'es')} "
            f"({_some(denied.values())}): without them a shard's device mask "
            "(CUDA_VISIBLE_DEVICES) and command line are unknown",
            AS_ENGINE_USER,
        )
    if not hidden and not denied:
        named = f" ({_some(sorted(engines.values()))})" if engines else ""
        report.ok(
            PROCESSES,
            f"{count(len(listed), 'GPU process', 'es')} in this worker's /proc, "
            f"{count(len(engines), 'engine')}{named} readable (cmdline, environ)",
        )


def _unreadable_entries(
    listed: dict[int, str], engines: dict[int, str], hidden: list[int], proc: Path
) -> dict[int, str]:
    """Each visible process whose /proc entries discovery needs but may not read, described."""
    denied: dict[int, str] = {}
    for pid in sorted(set(listed).union(engines).difference(hidden)):
        entries = ("cmdline", "environ") if pid in engines else ("cmdline",)
        entry = next((e for e in entries if _denied(proc / str(pid) / e)), None)
        if entry is not None:
            denied[pid] = f"{pid} {engines.get(pid) or 'on ' + listed[pid]}: {entry}"
    return denied


def _denied(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except PermissionError:
        return True
    except OSError:
        return False  # it exited since it was listed
    return False


def _some(items: Iterable[str], most: int = 5) -> str:
    shown = list(items)
    return ", ".join(shown[:most]) + (", ..." if len(shown) > most else "")


def _report_hidden_processes(
    report: Report, hidden: list[int], listed: dict[int, str], proc: Path
) -> None:
    """Why the GPU tools list processes this /proc lacks: hidepid, churn, or a PID namespace."""
    what = (
        f"the GPU tools list {count(len(hidden), 'process', 'es')} not in this worker's /proc "
        f"({_some(f'{pid} on {listed[pid]}' for pid in hidden)})"
    )
    hidepid = _proc_hidepid(proc)
    if hidepid is not None and os.geteuid() != 0:
        report.fail(
            PROCESSES,
            f"{what}: /proc is mounted with {hidepid}, which hides other users' processes",
            AS_ENGINE_USER,
        )
    elif len(hidden) < len(listed):
        report.fail(
            PROCESSES,
            f"{what}, while the others are there: exited since, or in another PID namespace",
            f"run `placewatch doctor` again; if they stay, {HOST_PID_NAMESPACE}",
        )
    else:
        report.fail(
            PROCESSES,
            f"{what}: the worker runs in a container without the host's PID namespace and "
            "sees no engine PIDs",
            HOST_PID_NAMESPACE,
        )


def _proc_hidepid(proc: Path) -> str | None:
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return None
    return hidepid_option(mounts, proc)


def hidepid_option(mounts: str, proc: Path) -> str | None:
    """The hidepid option of the proc mount at `proc` in a /proc/self/mounts text, when it
    hides anything (`hidepid=0` and, since Linux 5.8, `hidepid=off` hide nothing)."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == str(proc) and fields[2] == "proc":
            for option in fields[3].split(","):
                if option.startswith("hidepid=") and option not in ("hidepid=0", "hidepid=off"):
                    return option
    return None
