"""Which GPU processes belong to which shard.

A shard's processes are its main pid, its descendants (an engine may compute
in a child: Ollama's runner, vLLM's workers), and, only when the main pid
leads its process group, every process in that group (a child that
daemonized and was reparented to init keeps the group). A shard that does not
lead its group shares it with processes that are not its own (everything
started from one shell script), so the group says nothing about it.

Only the processes a GPU lists, and their ancestors, are looked up, through
/proc/PID/stat: the fields after the command name's closing parenthesis (the
name may hold spaces and parentheses) are state, ppid, pgrp, and the 20th is
the start time, which tells a shard's process from a later one that reuses
its pid. The read is a bare os.open/os.read (worker/procfs.py).

A running process keeps its parent until that parent exits, and its start
time for good, so each read is kept until the process or its parent exits,
which a pidfd (Linux 5.3 and later) tells: a tick whose processes all still
run reads nothing and polls every pidfd in one call. Without pidfds (an older
kernel, a seccomp filter that denies pidfd_open, another /proc than the
worker's own) a read lasts one tick. A process that moves itself to a new
group or session (setsid) after it was read keeps its old group here until a
process it depends on exits; engines daemonize before they touch a GPU.
"""

from __future__ import annotations

import os
import select
import weakref
from collections.abc import Collection
from pathlib import Path

import msgspec

from placewatch.schemas import GpuSample

from ..procfs import read_proc

MAX_DEPTH = 64
UNLISTED_BYTES = 1 << 30
"""Memory in use on a GPU that lists no process at all, above which someone this worker
cannot see holds it (a worker in a container without the host's PID namespace)."""
MAX_HANDLES = 512
"""Pidfds kept at most; past it the table holds none and reads last one tick, as without
pidfds (the soft limit on open files is often 1024, and the worker has its own to keep)."""

Stat = tuple[int, int, int | None]
"""(ppid, pgid, start time in clock ticks after boot) of one process."""


class ProcTable:
    """/proc/PID/stat reads, each pid read at most once while it runs.

    Call `refresh()` at the start of a tick: it forgets the processes that
    exited since, their children (reparented) and every read that has no pidfd.
    """

    def __init__(self, root: Path = Path("/proc"), max_handles: int = MAX_HANDLES) -> None:
        self.root = root
        self.max_handles = max_handles
        self._stats: dict[int, Stat | None] = {}
        self._fds: dict[int, int] = {}
        self._pids: dict[int, int] = {}  # pidfd -> pid
        self._poll = select.poll()
        self._handles = root == Path("/proc") and hasattr(os, "pidfd_open")
        self.used: set[int] = set()
        """The pids looked up since the last refresh()."""
        weakref.finalize(self, _close_all, self._fds)

    def refresh(self) -> bool:
        """Forget what no longer holds; True when an earlier read may no longer hold (a
        process read before exited, or there are no pidfds to tell)."""
        exited = {self._pids[fd] for fd, _ in self._poll.poll(0)} if self._fds else set()
        if exited:
            # Their children were reparented: read those again too.
            orphans = {p for p, found in self._stats.items() if found and found[0] in exited}
            for pid in exited | orphans:
                self._drop(pid)
        for pid in [p for p in self._stats if p not in self._fds]:
            del self._stats[pid]
        self.used = set()
        return bool(exited) or not self._handles

    def keep_only(self, pids: set[int]) -> None:
        """Close the pidfds of every process not in `pids`."""
        for pid in [p for p in self._fds if p not in pids]:
            self._drop(pid)

    def _stop_holding(self) -> None:
        """Hold no pidfd from here on: a parent without one could exit unseen, so no read
        may outlive its tick."""
        self._handles = False
        self.keep_only(set())

    def _drop(self, pid: int) -> None:
        self._stats.pop(pid, None)
        fd = self._fds.pop(pid, None)
        if fd is not None:
            self._pids.pop(fd, None)
            self._poll.unregister(fd)
            os.close(fd)

    def _read(self, pid: int) -> Stat | None:
        self.used.add(pid)
        if pid in self._stats:
            return self._stats[pid]
        # The pidfd first: if the process is replaced after it, the read below is of the
        # new process but the pidfd (of the old) reports an exit at the next refresh().
        fd = None
        if self._handles and len(self._fds) >= self.max_handles:
            self._stop_holding()
        if self._handles and pid > 0:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:  # gone, or in another PID namespace
                fd = None
            except OSError:  # ENOSYS (before Linux 5.3), EPERM (seccomp), EMFILE
                self._stop_holding()
        text = read_stat_text(self.root, pid)
        found = None if text is None else parse_stat(text)
        self._stats[pid] = found
        if fd is not None:
            if found is None:
                os.close(fd)
            else:
                self._fds[pid] = fd
                self._pids[fd] = pid
                self._poll.register(fd, select.POLLIN)
        return found

    def stat(self, pid: int) -> tuple[int, int] | None:
        """(ppid, pgid) of `pid`, or None when this worker cannot see it."""
        found = self._read(pid)
        return None if found is None else (found[0], found[1])

    def started(self, pid: int) -> int | None:
        """When `pid` started, in clock ticks since boot; None when it is not running."""
        found = self._read(pid)
        return None if found is None else found[2]

    def visible(self, pid: int) -> bool:
        return self._read(pid) is not None

    def leads_group(self, pid: int) -> bool:
        found = self._read(pid)
        return found is not None and found[1] == pid


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        os.close(fd)


def read_stat_text(root: Path, pid: int) -> str | None:
    data = read_proc(f"{root}/{pid}/stat", 4096)  # about 300 bytes
    return None if data is None else data.decode(errors="replace")


def parse_stat(text: str) -> Stat | None:
    """(ppid, pgid, start time) from the text of /proc/PID/stat; the start time may be None."""
    end = text.rfind(")")
    fields = text[end + 1 :].split() if end >= 0 else []
    try:
        ppid, pgid = int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None
    try:
        return ppid, pgid, int(fields[19])
    except (IndexError, ValueError):
        return ppid, pgid, None


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


Held = dict[str, dict[int, int | None]]
"""Shard id -> GPU index -> bytes its processes hold there (None: listed, size not given)."""


def attribute(
    gpus: list[GpuSample], owners: dict[int, str | None], foreign_unknown: Collection[str] = ()
) -> tuple[list[GpuSample], Held]:
    """GPUs with each process's shard and foreign memory; what each shard holds per GPU.
    A GPU whose bus id is in `foreign_unknown` (a process that may hold it went unread) has
    no foreign memory: what is not a shard's there may yet be one's."""
    held: Held = {}
    out = []
    for gpu in gpus:
        processes = []
        ours = 0
        for p in gpu.processes:
            sid = owners.get(p.pid)
            if sid is not None:
                per_gpu = held.setdefault(sid, {})
                before = per_gpu.get(gpu.index, 0)
                per_gpu[gpu.index] = (
                    None if before is None or p.used_bytes is None else before + p.used_bytes
                )
                ours += p.used_bytes or 0
                p = msgspec.structs.replace(p, shard=sid)  # noqa: PLW2901
            processes.append(p)
        unknown = gpu.memory_used_bytes is None or gpu.bus_id in foreign_unknown
        foreign = None if unknown else max((gpu.memory_used_bytes or 0) - ours, 0)
        out.append(msgspec.structs.replace(gpu, processes=processes, foreign_bytes=foreign))
    return out, held


def unseen_holders(gpus: list[GpuSample], table: ProcTable) -> dict[int, str]:
    """GPU index -> why its memory may belong to processes this worker cannot see."""
    unseen_by_gpu = {}
    for gpu in gpus:
        unseen = [p.pid for p in gpu.processes if not table.visible(p.pid)]
        if unseen:
            unseen_by_gpu[gpu.index] = (
                f"lists {len(unseen)} process(es) (pid {unseen[0]}...) that are not in this "
                "worker's /proc"
            )
        elif not gpu.processes and (gpu.memory_used_bytes or 0) > UNLISTED_BYTES:
            unseen_by_gpu[gpu.index] = (
                f"has {(gpu.memory_used_bytes or 0) / (1 << 30):.1f} GiB in use by processes "
                "the driver does not list to this worker"
            )
    return unseen_by_gpu
