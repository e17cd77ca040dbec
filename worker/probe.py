"""Running GPU tools: no shell, a timeout, the whole process group killed.

A GPU tool can hang: after some Xid errors nvidia-smi sits in the driver in
uninterruptible sleep (D state), where not even SIGKILL takes it until the
driver lets go. So every tool runs in its own session (its own process
group), is killed with its group at the timeout, and a tool that could not be
reaped is not started again while it lives: a worker that kept spawning it
would pile up stuck processes on a node that is already in trouble.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import anyio.abc
import psutil
from anyio.streams.text import TextReceiveStream

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


def use_pidfd_child_watcher() -> None:
    """Watch tool processes through pidfds, as Python 3.12+ does by default.

    Python 3.11's default asyncio child watcher starts a thread per child
    process: about a millisecond of CPU for every probe. A pidfd (Linux 5.3+)
    is polled on the event loop instead.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return  # an older kernel or a sandbox without pidfd_open
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


class ProbeRunner:
    """Runs tools with a timeout, at most one of each tool at a time."""

    def __init__(self, timeout_s: float = 5.0, kill_signal: int = signal.SIGKILL) -> None:
        self.timeout_s = timeout_s
        self.kill_signal = kill_signal  # a seam: tests stand in a signal a tool survives
        self._in_flight: set[str] = set()
        self._stuck: dict[str, psutil.Process] = {}

    def stuck(self, tool: str) -> int | None:
        """The pid of a killed `tool` that has not exited yet, or None."""
        proc = self._stuck.get(tool)
        if proc is None:
            return None
        try:
            # is_running() also checks the start time: a reused pid is not our tool.
            gone = not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            gone = True
        if gone:
            del self._stuck[tool]
            log.info("%s (pid %d) finally exited; probing it again", tool, proc.pid)
            return None
        return proc.pid

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
            proc = await anyio.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return "", f"{tool} could not start: {exc.strerror or exc}"
        out: list[str] = []
        err: list[str] = []
        timed_out = False
        try:
            with anyio.move_on_after(self.timeout_s) as scope:
                async with anyio.create_task_group() as tg:
                    assert proc.stdout is not None and proc.stderr is not None
                    tg.start_soon(_collect, proc.stdout, out)
                    tg.start_soon(_collect, proc.stderr, err)
                await proc.wait()
            timed_out = scope.cancelled_caught
        finally:
            if proc.returncode is None:
                await self._kill(tool, proc)
        if timed_out:
            return "", f"{tool} timed out after {self.timeout_s:g} s and was killed"
        stdout = "".join(out)
        if proc.returncode != 0:
            said = ("".join(err).strip() or stdout.strip()).splitlines()
            detail = said[0] if said else "no output"
            return stdout, f"{tool} exited {proc.returncode}: {detail}"
        return stdout, None

    async def _kill(self, tool: str, proc: anyio.abc.Process) -> None:
        """Kill the tool's whole group; remember it if it does not die."""
        # start_new_session made the tool the leader of its own group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, self.kill_signal)
        with anyio.move_on_after(REAP_WAIT_S, shield=True):
            await proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
        if proc.returncode is None:
            log.warning(
                "%s (pid %d) survived SIGKILL (uninterruptible sleep in the driver?); "
                "no new %s until it exits",
                tool,
                proc.pid,
                tool,
            )
            with contextlib.suppress(psutil.Error):
                self._stuck[tool] = psutil.Process(proc.pid)


async def _collect(stream: anyio.abc.ByteReceiveStream, into: list[str]) -> None:
    size = 0
    async for chunk in TextReceiveStream(stream, errors="replace"):
        size += len(chunk)
        if size > MAX_OUTPUT_BYTES:
            break
        into.append(chunk)
