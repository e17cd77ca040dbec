"""Which process each shard is, and whether it still runs.

A placement finds its process by `pid` or by `match` on the command line; a
reused pid is told apart by its start time (/proc/PID/stat), kept while the
process runs, as is the container and pod it runs in (/proc/PID/cgroup). A
shard is ready to be judged when its health URL answers 2xx (readiness.py) or,
without one, once its grace period has passed since its process started.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import psutil

from .attribution import ProcTable
from .cgroup import NONE, Container, read_container
from .placements import MATCH_BUDGET_S, MATCH_LINE_S, Placement, compiled_match
from .scope import EVERY, ProcessScope
from .verdict import GpuIds, Judgement, Observation

if TYPE_CHECKING:
    pass


@dataclass
class Tracked:
    """What persists about one shard between ticks."""

    placement: Placement
    pid: int | None = None
    create_time: float | None = None
    started: int | None = None
    """The process's start time in clock ticks (/proc/PID/stat): a reused pid differs."""
    ready: bool = False
    error: str | None = None
    """What went wrong finding its process or asking whether it is ready, when something did."""
    said: str | None = None
    """The last error logged for it: each is logged once, not every tick."""
    known: tuple[Judgement, datetime, int | None] | None = None
    """The last verdict evidence gave while the GPU tools answered, when, and of which pid:
    it stands, stale, while evidence is lost for that process (ShardPass._held)."""
    judged: tuple[Observation, GpuIds, Judgement] | None = None
    """The last observation judged, the GPUs it was judged on, and what judge() said."""
    container: Container = NONE
    """The container and pod its process runs in: read once when the process is found (a
    process's cgroup does not change while it runs)."""
    cpu_flag: str | None = None
    """The engine's own flag that keeps its model on the CPU ("-ngl 0"), read from its command
    line and environment once when a placed shard's process is found."""
    router: bool = False
    """Its process is a llama-server router, which loads no model itself (read likewise)."""

    def forget_process(self) -> None:
        self.pid = self.create_time = self.started = None
        self.ready = False
        self.container = NONE
        self.cpu_flag, self.router = None, False


def named(sid: str, placement: Placement) -> str:
    """A shard as its placement names it: the shards file's entry, the placements bucket's
    key, or the engine discovery found."""
    if placement.origin == "file":
        return f"shards-file entry {sid!r}"
    if placement.origin == "kv":
        return f"placement {sid!r} of the placements bucket"
    return f"discovered shard {sid!r}"


def shared_processes(tracked: Mapping[str, Tracked]) -> dict[str, str]:
    """One process, one shard: each shard whose process a shard before it (in `tracked`'s
    order, which is the order shards were first placed) already holds -> that shard. Two
    shards on one process would split its memory between them, and the one left without
    it would read `cpu_fallback` while its process computes on its GPUs."""
    holders: dict[int, str] = {}
    shared = {}
    for sid, t in tracked.items():
        if t.pid is not None and holders.setdefault(t.pid, sid) != sid:
            shared[sid] = holders[t.pid]
    return shared


def shared_logs(tracked: Mapping[str, Tracked], shared: Mapping[str, str]) -> dict[str, str]:
    """Each shard whose log another shard's live process writes too -> what to say. Two
    engines appending to one file interleave their lines, so neither's can be told apart: one
    would be given the other's verbosity, devices and failures."""
    writers: dict[tuple[str, str | None], dict[int, str]] = {}
    for sid, t in tracked.items():
        path = t.placement.spec.log_path
        if path and t.pid is not None and sid not in shared:
            where = (os.path.normpath(path), t.placement.log_prefix)  # a router's children
            writers.setdefault(where, {})[t.pid] = sid
    said = {}
    for (path, _), by_pid in writers.items():
        if len(by_pid) < 2:
            continue
        for pid, sid in by_pid.items():
            others = ", ".join(f"{o} (pid {p})" for p, o in by_pid.items() if p != pid)
            said[sid] = (
                f"two engines write this log ({path}): {others} too, so whose lines are whose "
                "cannot be told; give each engine its own log (llama.cpp: -lv 4 with "
                "--log-file)"
            )
    return said


def runs(table: ProcTable, pid: int, started: int | None) -> bool:
    """Whether `pid` runs and is the process that started then (a reused pid is not)."""
    return started is not None and table.started(pid) == started


def settled(tracked: Iterable[Tracked], table: ProcTable) -> bool:
    """Whether every shard still has the process it had (its start time, kept while its
    pidfd says it runs). The usual tick: nothing to look up, so no thread is needed."""
    return all(
        t.pid is not None
        and t.placement.spec.pid in (None, t.pid)
        and runs(table, t.pid, t.started)
        for t in tracked
    )


def find_processes(
    tracked: Iterable[Tracked], table: ProcTable, scope: ProcessScope = EVERY
) -> None:
    """Find each shard's process; notice one that exited or was replaced. Blocking.

    A shard whose process cannot be looked up for a reason of its own (a pid the OS refuses
    to consider, a `match` cut short) is marked with the error, and the others are looked up
    as usual. A `match` finds only processes `scope` admits."""
    listed: tuple[list[tuple[float, int, str]], float] | None = None

    def lines() -> tuple[list[tuple[float, int, str]], float]:
        """The command lines, and the patterns' deadline: MATCH_BUDGET_S for searching
        them, counted from when they are listed (the walk itself is not the patterns')."""
        nonlocal listed
        if listed is None:
            listed = command_lines(), time.monotonic() + MATCH_BUDGET_S
        return listed

    for t in tracked:
        try:
            _find_process(t, table, lines, scope)
            t.error = None
        except SlowPattern as exc:
            t.forget_process()
            t.error = str(exc)
        except Exception as exc:
            t.forget_process()
            t.error = f"looking up its process failed ({type(exc).__name__}: {exc})"


def _find_process(
    t: Tracked,
    table: ProcTable,
    lines: Callable[[], tuple[list[tuple[float, int, str]], float]],
    scope: ProcessScope,
) -> None:
    spec = t.placement.spec
    pid = spec.pid
    if pid is None and spec.match:
        if t.pid is not None and runs(table, t.pid, t.started):
            return
        pid = first_match(spec.match, *lines(), admits=scope.admits)
    if pid is None:
        t.forget_process()
        return
    if pid == t.pid and runs(table, pid, t.started):
        return
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = None
    started = table.started(pid)
    if created is None or started is None:
        t.forget_process()
        return
    t.pid, t.create_time, t.started, t.ready = pid, created, started, False
    t.container = read_container(pid, table.root)
    if t.placement.origin != "discovered":  # discovery read its flags already
        t.cpu_flag, t.router = own_flags(pid)


ROUTER = (
    "llama-server router (--models-dir, LLAMA_ARG_MODELS_DIR), which loads no model itself: "
    "each model it loads runs in a child found as <router>/<model>; place those, or leave "
    "them to discovery"
)


def own_flags(pid: int) -> tuple[str | None, bool]:
    """What on an engine's command line (or in its environment) keeps it on the CPU, as
    written (`-ngl 0`, `--device none`, vLLM's `--device cpu`), and whether it is a
    llama-server router; (None, False) for anything else, or a process that cannot be read."""
    from ..engines import engine_of, read_launch  # noqa: PLC0415 - when a placed one runs

    try:
        process = psutil.Process(pid)
        launch = read_launch(process.cmdline())
        if launch is None:
            return None, False
        try:
            env: dict[str, str] | None = process.environ()
        except psutil.AccessDenied:
            env = None
    except psutil.Error:
        return None, False
    launch = engine_of(launch).settle(launch, env)
    return engine_of(launch).cpu_flag(launch, env), launch.router


class SlowPattern(Exception):
    """A `match` not searched to the end of every command line in its time; says which."""


def first_match(
    pattern: str,
    lines: list[tuple[float, int, str]],
    deadline: float,
    admits: Callable[[int], bool] = lambda pid: True,
) -> int | None:
    """The pid of the first command line `pattern` finds of a process `admits` lets in;
    SlowPattern where it found none but could not search some line to its end by
    MATCH_LINE_S, or any line by `deadline`.

    The `regex` module rather than `re`: it backtracks far less, and it stops at a timeout,
    so that one search costs the tick at most MATCH_LINE_S."""
    compiled = compiled_match(pattern)
    skipped: list[int] = []
    for n, (_, pid, cmd) in enumerate(lines):
        left = deadline - time.monotonic()
        if left <= 0:
            skipped += [p for _, p, _ in lines[n:]]
            break
        try:
            if compiled.search(cmd, timeout=min(left, MATCH_LINE_S)) and admits(pid):
                return pid
        except TimeoutError:
            skipped.append(pid)
    if not skipped:
        return None
    raise SlowPattern(
        f"its `match` was not searched to the end of the command line of {_pids(skipped)} "
        f"(it may take {MATCH_LINE_S * 1000:g} ms a line, and every shard's "
        f"{MATCH_BUDGET_S * 1000:g} ms a tick); give a pattern with fewer open-ended "
        "repeats (`.*`, `+`), anchored on the engine's name"
    )


def _pids(pids: list[int], most: int = 5) -> str:
    shown = ", ".join(map(str, pids[:most])) + (", ..." if len(pids) > most else "")
    return f"{'pid' if len(pids) == 1 else f'{len(pids)} processes: pid'} {shown}"


def command_lines() -> list[tuple[float, int, str]]:
    """(start time, pid, command line) of every readable process, oldest first."""
    found = []
    me = psutil.Process().pid
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = proc.info.get("cmdline")
        if proc.pid == me or not cmdline:
            continue
        found.append((proc.info.get("create_time") or 0.0, proc.pid, " ".join(cmdline)))
    return sorted(found)
