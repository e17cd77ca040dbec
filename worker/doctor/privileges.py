"""Whether this worker holds the two privileges its reads of other users' processes need, and
what each one missing costs.

The kernel shows another user's /proc/PID/environ, fd and fdinfo (and opens
/proc/PID/fd/N) only to a reader that may ptrace it with PTRACE_MODE_READ_FSCREDS: one of
the same user whose capabilities cover the process's, or one with CAP_SYS_PTRACE. A log only
its owner may read needs CAP_DAC_READ_SEARCH (or CAP_DAC_OVERRIDE, which the deployments
leave out: it also writes). A root worker in a container with the runtime's default
capabilities has neither; a worker run as another user has none at all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..procfs import read_proc
from ..shards.discover import Discovered
from .report import Report

PRIVILEGES = "privileges"
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
CAP_SYS_PTRACE = 19

_NEEDED = (
    (
        "CAP_SYS_PTRACE",
        1 << CAP_SYS_PTRACE,
        "cannot read /proc/PID/environ, fd and fdinfo of other users' processes: their "
        "engines have no device mask (CUDA_VISIBLE_DEVICES) and no log",
    ),
    (
        "CAP_DAC_READ_SEARCH",
        1 << CAP_DAC_READ_SEARCH | 1 << CAP_DAC_OVERRIDE,
        "cannot read a log only its owner may read: such an engine's log is not read",
    ),
)


def check_privileges(
    found: Sequence[Discovered], report: Report, proc: Path = Path("/proc")
) -> None:
    """One line for the two privileges if both are held; else one for each missing, a
    failure where an engine of another user runs now."""
    held = effective_capabilities(proc)
    missing = [(name, cost) for name, bits, cost in _NEEDED if not held & bits]
    if not missing:
        report.ok(PRIVILEGES, "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: other users' engines, "
                  "their /proc entries and their logs, are read")  # fmt: skip
        return
    others = _other_users_engines(found, proc)
    for name, cost in missing:
        todo = f"give the worker {name} (docs/operations.md, The worker's own privileges)"
        if others:
            report.fail(PRIVILEGES, f"{cost} ({', '.join(others[:5])})", todo)
        else:
            report.skip(PRIVILEGES, f"{cost}; no engine of another user runs now", todo)


def effective_capabilities(proc: Path = Path("/proc")) -> int:
    """This process's effective capabilities (/proc/self/status `CapEff`), 0 if unknown."""
    data = read_proc(proc / "self" / "status") or b""
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split()[1], 16)
            except (IndexError, ValueError):
                return 0
    return 0


def _other_users_engines(found: Sequence[Discovered], proc: Path) -> list[str]:
    """The engines found whose process another user runs, as `id (uid N)`."""
    mine = os.geteuid()
    others = []
    for d in found:
        if d.spec.pid is None:
            continue
        try:
            uid = os.stat(proc / str(d.spec.pid)).st_uid
        except OSError:
            continue
        if uid != mine:
            others.append(f"{d.spec.id} (uid {uid})")
    return others
