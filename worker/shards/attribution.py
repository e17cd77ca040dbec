"""Which GPU processes belong to which shard.

A shard's processes are its main pid, its descendants (an engine may compute
in a child: Ollama's runner, vLLM's workers), and, only when the main pid
leads its process group, every process in that group (a child that
daemonized and was reparented to init keeps the group). A shard that does not
lead its group shares it with processes that are not its own (everything
started from one shell script), so the group says nothing about it.

Only the processes a GPU lists are looked up, through /proc/PID/stat: the
fields after the command name's closing parenthesis (the name may hold
spaces and parentheses) are state, ppid, pgrp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 64


@dataclass
class ProcTable:
    """/proc/PID/stat reads for one tick, each pid read at most once."""

    root: Path = Path("/proc")
    _stats: dict[int, tuple[int, int] | None] = field(default_factory=dict)

    def stat(self, pid: int) -> tuple[int, int] | None:
        """(ppid, pgid) of `pid`, or None when this worker cannot see it."""
        if pid not in self._stats:
            self._stats[pid] = read_stat(self.root, pid)
        return self._stats[pid]

    def visible(self, pid: int) -> bool:
        return self.stat(pid) is not None

    def leads_group(self, pid: int) -> bool:
        found = self.stat(pid)
        return found is not None and found[1] == pid


def read_stat(root: Path, pid: int) -> tuple[int, int] | None:
    try:
        text = (root / str(pid) / "stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return parse_stat(text)


def parse_stat(text: str) -> tuple[int, int] | None:
    """(ppid, pgid) from the text of /proc/PID/stat."""
    end = text.rfind(")")
    if end < 0:
        return None
    fields = text[end + 1 :].split()
    if len(fields) < 3:
        return None
    try:
        return int(fields[1]), int(fields[2])
    except ValueError:
        return None


def owner(pid: int, shard_pids: dict[int, str], table: ProcTable) -> str | None:
    """The shard a process belongs to, or None.

    The nearest shard among the process and its ancestors wins (a shard
    started by another shard's process is its own); failing that, the shard
    whose pid leads the process's group.
    """
    current = pid
    for _ in range(MAX_DEPTH):
        if current in shard_pids:
            return shard_pids[current]
        found = table.stat(current)
        if found is None or found[0] <= 1:
            break
        current = found[0]
    found = table.stat(pid)
    if found is not None:
        pgid = found[1]
        if pgid in shard_pids and table.leads_group(pgid):
            return shard_pids[pgid]
    return None
