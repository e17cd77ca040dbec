"""Running GPU tools: no shell, a timeout, the whole process group killed.

A GPU tool can hang: after some Xid errors nvidia-smi sits in the driver in
uninterruptible sleep (D state), where not even SIGKILL takes it until the
driver lets go. So every tool runs in its own session (its own process
group), is killed with its group at the timeout, and a tool that could not be
reaped is not started again while it lives: a worker that kept spawning it
would pile up stuck processes on a node that is already in trouble.

A tool's answer is what it printed by the time it exited, whatever its
children do. A child it leaves running (a stand-in nvidia-smi that starts
`sleep 300 &`, a wrapper's helper) inherits its stdout and holds the pipe
open, so end of file can come minutes later or never: the tool's exit is
awaited together with its pipes, and once it has exited what is left in them
is read for a short grace and no longer. After every run, however it ended,
the whole group is killed, so nothing a tool started outlives its run. The
group is killed before the tool is reaped: until then the tool's pid, which
is the group's id, cannot be given to another process, so the signal cannot
reach a stranger's group. A child that called setsid() itself has left the
group and is out of reach: a known limit (only following every descendant
would catch it).

The tool is started with subprocess.Popen and its pipes and its exit (a
pidfd, Linux 5.3+) are awaited on the event loop directly, one task a run:
asyncio's subprocess transport, through anyio, adds a child watcher and its
transport and protocol objects to every run, work the event loop does for
nothing a tool needs: a tool run is most of a tick's own work on a node
without NVML (bench/tick_cost.py measures the tick with this path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import anyio

log = logging.getLogger(__name__)

MAX_OUTPUT_BYTES = 32 * 1024 * 1024
"""More than any real tool prints; a runaway tool is cut here."""

REAP_WAIT_S = 1.0
"""How long a killed tool has to exit before it is taken to be stuck in the driver."""

GRACE_S = 0.05
"""How long the pipes are read once the tool has exited. What the tool wrote is in them by
then; the grace is for output a helper of its is still flushing as it exits, and it ends
the reading without waiting for end of file, which a child left running can hold off."""

POLL_S = 0.01
"""Without a pidfd, how often the tool's exit is looked for."""


@dataclass(frozen=True)
class Child:
    """A tool started by `ProbeRunner.start`: its process, a descriptor readable once it
    exits (None without pidfd), and what each pipe has given so far, by descriptor."""

    proc: subprocess.Popen[bytes]
    pidfd: int | None
    out: bytearray
    err: bytearray
    pipes: dict[int, bytearray]
    """stdout's and stderr's descriptors, to `out` and `err`; a pipe at its end is dropped."""


@dataclass(frozen=True)
class ProbeResult:
    """A tool's output, or why there is none. `error` is None when it ran and exited 0."""

    tool: str
    stdout: str
    error: str | None
    latency_ms: float
    stuck: bool = False
    """A run of this tool survived SIGKILL and has not exited: the source is degraded."""

    @property
    def ok(self) -> bool:
        return self.error is None


class ProbeRunner:
    """Runs tools with a timeout, at most one of each tool at a time."""

    def __init__(self, timeout_s: float = 5.0, kill_signal: int = signal.SIGKILL) -> None:
        self.timeout_s = timeout_s
        self.kill_signal = kill_signal  # a seam: tests stand in a signal a tool survives
        self._in_flight: set[str] = set()
        self._stuck: dict[str, subprocess.Popen[bytes]] = {}

    def stuck(self, tool: str) -> int | None:
        """The pid of a killed `tool` that has not exited yet, or None."""
        proc = self._stuck.get(tool)
        if proc is None:
            return None
        if not has_exited(proc.pid):  # our child: its pid is not reused until this reaps it
            return proc.pid
        # Its group was killed at the timeout; whatever of it was stuck beside the
        # tool goes now, while the tool, unreaped, still holds the group's id.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, self.kill_signal)
        proc.wait()  # it has exited: this reaps at once
        del self._stuck[tool]
        log.info("%s (pid %d) finally exited; probing it again", tool, proc.pid)
        return None

    async def run(self, argv: Sequence[str]) -> ProbeResult:
        tool = os.path.basename(argv[0])
        started = time.perf_counter()

        def result(stdout: str, error: str | None) -> ProbeResult:
            latency = (time.perf_counter() - started) * 1000
            return ProbeResult(tool, stdout, error, latency, stuck=tool in self._stuck)

        stuck_pid = self.stuck(tool)
        if stuck_pid is not None:
            return result(
                "",
                f"{tool} (pid {stuck_pid}) is stuck in the driver and survived SIGKILL; "
                "not starting another until it exits (check dmesg for Xid errors)",
            )
        if tool in self._in_flight:
            return result("", f"the previous {tool} is still running")
        path = shutil.which(argv[0])
        if path is None:
            return result("", f"{argv[0]} not found on PATH")
        self._in_flight.add(tool)
        try:
            stdout, error = await self._run(tool, [path, *argv[1:]])
        finally:
            self._in_flight.discard(tool)
        return result(stdout, error)

    def start(self, tool: str, argv: Sequence[str]) -> Child | str:
        """`argv` started in a session of its own, its pipes ready to read without blocking;
        or why it could not start."""
        try:
            proc = subprocess.Popen(  # returns once the tool is exec'd
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return f"{tool} could not start: {exc.strerror or exc}"
        assert proc.stdout is not None and proc.stderr is not None
        out, err = bytearray(), bytearray()
        pipes = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        for fd in pipes:
            os.set_blocking(fd, False)
        return Child(proc, open_pidfd(proc.pid), out, err, pipes)

    async def _run(self, tool: str, argv: list[str]) -> tuple[str, str | None]:
        child = self.start(tool, argv)
        if isinstance(child, str):
            return "", child
        proc, out, err = child.proc, child.out, child.err
        exited = False
        try:
            with anyio.move_on_after(self.timeout_s):
                await _read_until_exit(proc.pid, child.pidfd, child.pipes)
                exited = True
            if exited:
                await read_left(child.pipes)
        finally:
            await self.end(tool, child, exited)
        if not exited:
            return "", f"{tool} timed out after {self.timeout_s:g} s and was killed"
        stdout = out.decode(errors="replace")
        if proc.returncode != 0:
            said = (err.decode(errors="replace").strip() or stdout.strip()).splitlines()
            detail = said[0] if said else "no output"
            return stdout, f"{tool} exited {proc.returncode}: {detail}"
        return stdout, None

    async def end(self, tool: str, child: Child, exited: bool) -> None:
        """Kill the tool's whole group, then reap the tool and close its pipes; remember it if
        it does not die. `exited`: the tool was seen to exit (not reaped yet)."""
        proc, pidfd = child.proc, child.pidfd
        try:
            # start_new_session made the tool the leader of its own group; until it
            # is reaped, its pid (the group's id) cannot be given to another process,
            # so the signal reaches what this run started and nothing else.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, self.kill_signal)
            if exited and proc.poll() is not None:
                return
            with anyio.move_on_after(REAP_WAIT_S, shield=True):
                await _exited(proc, pidfd)
        finally:
            if pidfd is not None:
                os.close(pidfd)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        if proc.returncode is None:
            log.warning(
                "%s (pid %d) survived SIGKILL (uninterruptible sleep in the driver?); "
                "no new %s until it exits",
                tool,
                proc.pid,
                tool,
            )
            self._stuck[tool] = proc


async def _read_until_exit(pid: int, pidfd: int | None, pipes: dict[int, bytearray]) -> None:
    """Read the pipes until the tool has exited, leaving it unreaped.

    Not until end of file: a child that the tool left running holds the pipes
    open. Pipes at their end or past the cap are dropped from `pipes`.
    """
    while True:
        read_ready(pipes)
        if pidfd is not None:
            if pidfd in await readable([*pipes, pidfd]):
                return
        elif has_exited(pid):
            return
        else:
            with anyio.move_on_after(POLL_S):
                await readable(pipes)


async def read_left(pipes: dict[int, bytearray]) -> None:
    """Once the tool has exited: what is left in its pipes, for GRACE_S at most."""
    read_ready(pipes)
    if not pipes:  # the usual case: both at their end already
        return
    with anyio.move_on_after(GRACE_S):
        while pipes:
            await readable(pipes)
            read_ready(pipes)


def read_ready(pipes: dict[int, bytearray]) -> None:
    """Read a chunk from each pipe that has one; a pipe at its end is dropped, a runaway one cut."""
    for fd, into in list(pipes.items()):
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk or len(into) + len(chunk) > MAX_OUTPUT_BYTES:
            del pipes[fd]
        else:
            into.extend(chunk)


def open_pidfd(pid: int) -> int | None:
    """A descriptor that is readable once `pid` has exited; None before Linux 5.3 or in a
    sandbox that refuses pidfd_open."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def has_exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it (WNOWAIT)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already; only this module reaps its tools
        return True


async def _exited(proc: subprocess.Popen[bytes], pidfd: int | None) -> None:
    """Until the process has exited, and reap it."""
    while proc.poll() is None:
        if pidfd is None:
            await anyio.sleep(POLL_S)  # nothing to wait on but the exit
        else:
            await readable([pidfd])


async def readable(fds: Collection[int]) -> set[int]:
    """Until any of `fds` is readable (a pidfd is once its process exits); those that are.

    One future for all of them on the running loop (the worker runs on
    asyncio: nats-py needs it); anyio.wait_readable takes one descriptor, and a
    task for each would cost as much as the waiting saves.
    """
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    woken: set[int] = set()

    def wake(fd: int) -> None:
        woken.add(fd)
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, wake, fd)
    try:
        await ready
    finally:
        for fd in fds:
            loop.remove_reader(fd)
    return woken


class Watched:
    """Descriptors watched for readability while the block runs, each registered with the
    event loop once rather than once a wait: a looping tool's pipes are waited on every
    pass, and registering them anew each time is two epoll_ctl calls a descriptor. A
    descriptor at its end must be dropped (`keep`): it reads as readable for ever."""

    def __init__(self, fds: Collection[int]) -> None:
        self._fds = set(fds)
        self._woken: set[int] = set()
        self._ready: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> Watched:
        for fd in self._fds:
            self._loop.add_reader(fd, self._wake, fd)
        return self

    def __exit__(self, *_: object) -> None:
        self.keep(())

    def keep(self, fds: Collection[int]) -> None:
        """Stop watching every descriptor but `fds`."""
        for fd in self._fds - set(fds):
            self._loop.remove_reader(fd)
            self._fds.discard(fd)

    def _wake(self, fd: int) -> None:
        ready = self._ready
        if ready is not None:
            self._woken.add(fd)
            if not ready.done():
                ready.set_result(None)

    async def wait(self) -> set[int]:
        """Until any of the descriptors is readable; those that are. The loop's selector
        reports a descriptor for as long as it stays readable, so what came before the wait
        is reported at once; one just read out may be reported once more (the selector
        looked before it was read): read without blocking."""
        self._woken = set()
        self._ready = self._loop.create_future()
        try:
            await self._ready
        finally:
            self._ready = None
        return self._woken
