"""Running GPU tools: no shell, a timeout, the whole process group killed.

A GPU tool can hang: after some Xid errors nvidia-smi sits in the driver in
uninterruptible sleep (D state), where not even SIGKILL takes it until the
driver lets go. So every tool runs in its own session (its own process
group), is killed with its group at the timeout, and a tool that could not be
reaped is not started again while it lives: a worker that kept spawning it
would pile up stuck processes on a node that is already in trouble.

The tool is started with subprocess.Popen and its pipes and its exit (a
pidfd, Linux 5.3+) are awaited on the event loop directly, one task a run:
asyncio's subprocess transport, through anyio, cost the worker about 0.7 ms
more CPU a run, as much as the rest of a tick's own work on a node without
NVML (bench/tick_cost.py).
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
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

log = logging.getLogger(__name__)

MAX_OUTPUT_BYTES = 32 * 1024 * 1024
"""More than any real tool prints; a runaway tool is cut here."""

REAP_WAIT_S = 1.0
"""How long a killed tool has to exit before it is taken to be stuck in the driver."""


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
        if proc.poll() is None:  # our child: its pid is not reused until this reaps it
            return proc.pid
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

    async def _run(self, tool: str, argv: list[str]) -> tuple[str, str | None]:
        try:
            proc = subprocess.Popen(  # noqa: ASYNC220 - returns once the tool is exec'd
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return "", f"{tool} could not start: {exc.strerror or exc}"
        assert proc.stdout is not None and proc.stderr is not None
        out, err = bytearray(), bytearray()
        timed_out = False
        try:
            with anyio.move_on_after(self.timeout_s) as scope:
                await _read_all({proc.stdout.fileno(): out, proc.stderr.fileno(): err})
                await _exited(proc)
            timed_out = scope.cancelled_caught
        finally:
            if proc.poll() is None:
                await self._kill(tool, proc)
            proc.stdout.close()
            proc.stderr.close()
        if timed_out:
            return "", f"{tool} timed out after {self.timeout_s:g} s and was killed"
        stdout = out.decode(errors="replace")
        if proc.returncode != 0:
            said = (err.decode(errors="replace").strip() or stdout.strip()).splitlines()
            detail = said[0] if said else "no output"
            return stdout, f"{tool} exited {proc.returncode}: {detail}"
        return stdout, None

    async def _kill(self, tool: str, proc: subprocess.Popen[bytes]) -> None:
        """Kill the tool's whole group; remember it if it does not die."""
        # start_new_session made the tool the leader of its own group; not reaped
        # yet, it still holds that group id.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, self.kill_signal)
        with anyio.move_on_after(REAP_WAIT_S, shield=True):
            await _exited(proc)
        if proc.returncode is None:
            log.warning(
                "%s (pid %d) survived SIGKILL (uninterruptible sleep in the driver?); "
                "no new %s until it exits",
                tool,
                proc.pid,
                tool,
            )
            self._stuck[tool] = proc


async def _read_all(pipes: dict[int, bytearray]) -> None:
    """Read each pipe to its end, whichever has something first; a runaway one is cut."""
    reading = dict(pipes)
    for fd in reading:
        os.set_blocking(fd, False)
    while reading:
        for fd, into in list(reading.items()):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk or len(into) + len(chunk) > MAX_OUTPUT_BYTES:
                del reading[fd]
            else:
                into.extend(chunk)
        if reading:
            await _readable(list(reading))


async def _exited(proc: subprocess.Popen[bytes]) -> None:
    """Until the process has exited, and reap it."""
    if proc.poll() is not None:
        return
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # before Linux 5.3, or a sandbox without it
        while proc.poll() is None:  # noqa: ASYNC110 - nothing to wait on but the exit
            await anyio.sleep(0.01)
        return
    try:
        await _readable([pidfd])
    finally:
        os.close(pidfd)
    proc.wait()


async def _readable(fds: list[int]) -> None:
    """Until any of `fds` is readable (a pidfd is once its process exits).

    One future for all of them on the running loop (the worker runs on
    asyncio: nats-py needs it); anyio.wait_readable takes one descriptor, and a
    task for each would cost as much as the waiting saves.
    """
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        for fd in fds:
            loop.remove_reader(fd)
