"""Which GPU processes belong to which shard.

A shard's processes are its main pid, its descendants (an engine may compute
in a child: Ollama's runner, vLLM's workers), and, only when the main pid
leads its process group, every process in that group (a child that
daemonized and was reparented to init keeps the group). A shard that does not
lead its group shares it with processes that are not its own (everything
started from one shell script), so the group says nothing about it.

Only the processes a GPU lists are looked up, through /proc/PID/stat: the
fields after the command name's closing parenthesis (the name may hold
spaces and parentheses) are state, ppid, pgrp, and the 20th is the start
time, which tells a shard's process from a later one that reuses its pid.
Every GPU process is read every tick, so the read is a bare os.open/os.read:
pathlib and a buffered file object cost three times as much.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 64


@dataclass
class ProcTable:
    """/proc/PID/stat reads for one tick, each pid read at most once."""

    root: Path = Path("/proc")
    _texts: dict[int, str | None] = field(default_factory=dict)
    _stats: dict[int, tuple[int, int] | None] = field(default_factory=dict)

    def _text(self, pid: int) -> str | None:
        if pid not in self._texts:
            self._texts[pid] = read_stat_text(self.root, pid)
        return self._texts[pid]

    def stat(self, pid: int) -> tuple[int, int] | None:
        """(ppid, pgid) of `pid`, or None when this worker cannot see it."""
        if pid not in self._stats:
            text = self._text(pid)
            self._stats[pid] = None if text is None else parse_stat(text)
        return self._stats[pid]

    def started(self, pid: int) -> int | None:
        """When `pid` started, in clock ticks since boot; None when it is not running."""
        text = self._text(pid)
        return None if text is None else parse_start(text)

    def visible(self, pid: int) -> bool:
        return self.stat(pid) is not None

    def leads_group(self, pid: int) -> bool:
        found = self.stat(pid)
        return found is not None and found[1] == pid


def read_stat_text(root: Path, pid: int) -> str | None:
    try:
        fd = os.open(f"{root}/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)  # about 300 bytes
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode(errors="replace")


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


def parse_start(text: str) -> int | None:
    """The start time (clock ticks after boot) from the text of /proc/PID/stat."""
    end = text.rfind(")")
    if end < 0:
        return None
    try:
        return int(text[end + 1 :].split()[19])
    except (IndexError, ValueError):
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
