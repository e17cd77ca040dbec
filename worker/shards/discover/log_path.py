"""Where a discovered engine's output can be read: the `log_path` of its placement.

A placed shard names its log; a discovered one shows it in /proc, where it can:

- its stderr or stdout, when that is a regular file (`llama-server ... > llama.log 2>&1`):
  /proc/PID/fd/2 and /1 name it. A pipe (a supervisor, an Ollama server reading its runner),
  a terminal or /dev/null holds nothing to follow (`piped_output` says how to make a pipe's
  readable). A file deleted while the engine writes to
  it stays its log: what it said there stands, stale (engines/evidence/source.py, Deleted).
- llama.cpp's `--log-file FNAME` (or LLAMA_ARG_LOG_FILE; common/arg.cpp at b11434), when
  the engine holds that file open. It gets llama.cpp's common log only: what llama.cpp
  writes straight to stderr is not in it, "warning: no usable GPU found, --gpu-layers
  option will be ignored" among it, so a stderr file comes first.
- the systemd journal, when the output is a socket and the process's cgroup names the
  service it runs as (engines/evidence/journal/units.py): journald keeps what a service
  writes to its socket under the unit's name (`StandardOutput=journal`, systemd's default,
  as Ollama's install runs `ollama.service`). Its `log_path` is `journal:<unit>`.

llama.cpp and Ollama log to stderr, vLLM to stdout (its logger's stream handler); neither
Ollama nor vLLM has a log-file flag. An Ollama runner writes its stderr to a pipe that its
server copies to the server's own stderr, and shares the server's stdout (Ollama's
llm/server.go), so `ollama serve > ollama.log 2>&1` makes that file the runner's stdout.

An engine in a container writes to a pipe its runtime reads; the runtime keeps the file. For a
container's process (its id from its cgroup, cgroup.py) the log is the kubelet's
`/var/log/containers/<pod>_<namespace>_<container>-<id>.log`, a link to the CRI file under
`/var/log/pods/<namespace>_<pod>_<uid>/<container>/`, or Docker's json-file log
`/var/lib/docker/containers/<id>/<id>-json.log`: files the runtime names by the container's id
and only it writes (the DaemonSet mounts them read-only). unwrap.py reads their format.

A path is used only when it names, in this worker's filesystem, the very file the engine
holds open (a container's /var/log is not the node's) and this worker may read it. A path
on a command line that the engine does not hold open is not followed: anyone may write
one, and the worker, often root, would read what it names. What is found is how the log is
opened from then on (engines/evidence/source.py): a file the engine holds, through the
engine's own descriptor, so that a path swapped after this walk changes nothing; a runtime's
file, as a file of that runtime's log folder.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import psutil

from ...engines import Launch, engine_of
from ...engines.evidence.journal import unit_of
from ...engines.evidence.source import (
    DELETED,
    JOURNAL_PREFIX,
    HeldLog,
    JournalLog,
    LogSource,
    PathLog,
)
from ...engines.flags import LOG_FILE, lookup
from .. import cgroup
from ..cgroup import CONTAINER_ID

DOCKER_CONTAINERS = Path("/var/lib/docker/containers")
POD_LOGS = Path("/var/log/pods")
"""The kubelet's own folder of every container's CRI log (/var/log/containers links there)."""


def find_log(
    launch: Launch, env: Mapping[str, str] | None, pid: int, proc: Path = Path("/proc")
) -> HeldLog | JournalLog | None:
    """The file the engine's output goes to that this worker can follow, else the journal
    that keeps it, or None.

    Reads /proc/PID/fd (as root, or as the engine's user); None for anything it may not read.
    """
    first, second = engine_of(launch).outputs
    fds = proc / str(pid) / "fd"
    found = _held(fds / str(first))
    if found is None:
        found = _log_file_flag(launch, env, proc / str(pid))
    if found is None:
        found = _held(fds / str(second))
    if found is None:
        found = _deleted(fds / str(first)) or _deleted(fds / str(second))
    if found is None:
        return _journal(fds, (first, second), proc / str(pid), pid)
    return HeldLog(found[0], pid, found[1], str(proc))


def _journal(fds: Path, outputs: tuple[int, int], process: Path, pid: int) -> JournalLog | None:
    """The journal of the service the process runs as, when its output is a socket (to
    journald: a service's other sockets are not its stdout or stderr)."""
    sockets = [fd for fd in outputs if _link(fds / str(fd)).startswith("socket:")]
    if not sockets:
        return None
    try:
        with open(process / "cgroup", "rb") as f:
            unit = unit_of(f.read(cgroup.MAX_CGROUP_BYTES).decode("utf-8", "replace"))
    except OSError:
        return None
    return None if unit is None else JournalLog(unit, pid, _started(pid))


OUTPUT_NAMES = {1: "stdout", 2: "stderr"}


def piped_output(launch: Launch, pid: int, proc: Path = Path("/proc")) -> str | None:
    """Why an engine's output is not followed where it goes to a pipe (`... 2>&1 | cat`, a
    parent or supervisor holding the other end), naming the descriptor, and how to make it
    readable; None where neither of its outputs is a pipe."""
    fds = proc / str(pid) / "fd"
    for fd in engine_of(launch).outputs:
        link = _link(fds / str(fd))
        if link.startswith("pipe:"):
            own = max(launch.dialect.settings.get(LOG_FILE, (frozenset(), None))[0], default="")
            flag = f"; or {own} FILE" if own else ""  # llama.cpp's --log-file
            return (
                f"its output goes to a pipe ({OUTPUT_NAMES[fd]}, fd {fd}: {link}), which "
                f"only the process at its other end reads; send it to a file (> FILE 2>&1{flag}) "
                "or run it as a systemd unit, whose output the journal holds"
            )
    return None


def placed_journal(unit: str, pid: int | None, proc: Path = Path("/proc")) -> JournalLog:
    """A placement's `journal:<unit>`: read only when its process runs as that unit, as the
    file of a placed `log_path` is read only when its process's user could read it."""
    if pid is None:
        return JournalLog(
            unit, None, refused=f"{JOURNAL_PREFIX}{unit} is read once its process runs"
        )
    try:
        with open(proc / str(pid) / "cgroup", "rb") as f:
            own = unit_of(f.read(cgroup.MAX_CGROUP_BYTES).decode("utf-8", "replace"))
    except OSError:
        own = None
    if own != unit:
        runs = f"it runs as {own}" if own else "it runs as no system service"
        why = f"{JOURNAL_PREFIX}{unit} is not the journal of the shard's process ({runs})"
        return JournalLog(unit, pid, refused=f"{why}, so it is not read")
    return JournalLog(unit, pid, _started(pid))


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None  # read from the unit's newest entries


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:
        return ""


def _held(fd: Path) -> tuple[str, int] | None:
    """The path of the file a descriptor writes to, and its number, as `_output_file`."""
    found = _output_file(fd)
    return None if found is None else (found, int(fd.name))


def _deleted(fd: Path) -> tuple[str, int] | None:
    """The path a descriptor's regular file had until it was deleted under the process, and
    its number: still its log, so that what it said stands, stale, through the walks (never
    opened again: source.Deleted)."""
    try:
        target = os.readlink(fd)
        held = os.stat(fd)
    except OSError:
        return None
    if not (target.startswith("/") and target.endswith(DELETED) and stat.S_ISREG(held.st_mode)):
        return None
    return target.removesuffix(DELETED), int(fd.name)


def _output_file(fd: Path) -> str | None:
    """The path of the regular file an open descriptor (/proc/PID/fd/N) writes to, when this
    worker sees that very file at that path and may read it."""
    try:
        target = os.readlink(fd)
        held = os.stat(fd)
    except OSError:
        return None  # closed, exited, or another user's process
    if not target.startswith("/") or target.endswith(DELETED):
        return None  # pipe:[N], socket:[N], anon_inode:..., or a file no longer there
    return _same_readable_file(target, held)


def _same_readable_file(path: str, held: os.stat_result) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (held.st_dev, held.st_ino):
        return None  # a terminal, /dev/null; or another file in this worker's view (a container)
    return path if os.access(path, os.R_OK) else None


def _log_file_flag(
    launch: Launch, env: Mapping[str, str] | None, process: Path
) -> tuple[str, int] | None:
    """llama.cpp's --log-file, when the engine holds it open (a relative name is its own
    working folder's)."""
    given = lookup(LOG_FILE, launch, env)
    if given is None or not given[1]:
        return None
    try:
        cwd = os.readlink(process / "cwd")
        fds = list((process / "fd").iterdir())
    except OSError:
        return None
    wanted = os.path.normpath(os.path.join(cwd, given[1]))
    for fd in fds:
        try:
            if os.readlink(fd) == wanted:
                return _held(fd)
        except OSError:
            continue  # closed since the listing
    return None


def container_log(
    container_id: str | None,
    pid: int | None = None,
    *,
    logs: Path | None = None,
    pods: Path = POD_LOGS,
    docker: Path = DOCKER_CONTAINERS,
) -> PathLog | None:
    """The file a container runtime keeps of the container's output (of process `pid`),
    when this worker may read it: the kubelet's (the file its link in `logs` names, in
    `pods`), else Docker's json-file."""
    if container_id is None or not CONTAINER_ID.fullmatch(container_id):
        return None
    logs = cgroup.CONTAINER_LOGS if logs is None else logs
    suffix = f"-{container_id}.log"
    try:
        names = [n for n in os.listdir(logs) if n.endswith(suffix)]
    except OSError:
        names = []
    for name in names:
        target = os.path.realpath(logs / name)
        if _readable_file(target):
            return PathLog(target, pid, runtime_dir=os.path.realpath(pods))
    own = docker / container_id / f"{container_id}-json.log"
    if _readable_file(str(own)):
        return PathLog(str(own), pid, runtime_dir=os.path.realpath(docker))
    return None


def log_source(
    path: str, found: LogSource | None, pid: int | None, proc: Path = Path("/proc")
) -> LogSource:
    """How a shard's log at `path` is opened: as discovery `found` it, or a placed path read
    as the user of its process `pid` (a runtime's file where it lies in a runtime's folder;
    `journal:<unit>`, the unit's journal where its process runs as that unit)."""
    if found is not None:
        return found
    if path.startswith(JOURNAL_PREFIX):
        return placed_journal(path.removeprefix(JOURNAL_PREFIX), pid, proc)
    runtime = next((f for f in (POD_LOGS, DOCKER_CONTAINERS) if path.startswith(f"{f}/")), None)
    return PathLog(path, pid, runtime_dir=str(runtime) if runtime else None)


def _readable_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and os.access(path, os.R_OK)
    except OSError:
        return False
