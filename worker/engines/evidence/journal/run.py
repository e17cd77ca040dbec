"""One bounded run of journalctl: its output up to a size, within a time, then it is killed.

It runs in the engine logs' reading thread (follow.py), which must give the tick its answer
by the tick's deadline: so the run has a hard time limit and a byte cap, and is ended with
its process group, whatever it was doing, once either is reached. Blocking.

journalctl gets no shell, no terminal (stdin is /dev/null, so it never pages or asks), and an
environment of its own: `SYSTEMD_PAGER` and colours off and the C locale, so that what it
writes does not depend on the worker's environment.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

ERROR_BYTES = 4096
"""What is kept of journalctl's stderr: its first lines say why it failed."""
REAP_S = 1.0
"""How long a killed journalctl has to exit before it is left to the kernel."""
_ENV = {"PATH": os.defpath, "LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}


@dataclass(frozen=True)
class Run:
    """What one run of journalctl wrote, and how it ended."""

    out: bytes
    error: bytes
    returncode: int | None
    """Its exit status; None: it was stopped at the byte cap or the time limit."""

    @property
    def stopped(self) -> bool:
        return self.returncode is None


def run(args: Sequence[str], *, cap: int, timeout_s: float) -> Run:
    """Run `args` (journalctl's path first) and read its stdout until it ends, until `cap`
    bytes were read, or for `timeout_s`; its process group is killed either way."""
    proc = subprocess.Popen(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_ENV,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, error = bytearray(), bytearray()
    ended = False
    try:
        ended = _read(proc.stdout.fileno(), proc.stderr.fileno(), out, error, cap, timeout_s)
    finally:
        proc.stdout.close()
        proc.stderr.close()
        _end(proc, ended=ended)
    code = proc.returncode if ended else None
    return Run(bytes(out[:cap]), bytes(error[:ERROR_BYTES]), code)


def _end(proc: subprocess.Popen[bytes], *, ended: bool) -> None:
    """Reap journalctl; one that was stopped, or that does not exit once its pipes ended, is
    killed with its group first. The kill comes before the reaping: until then its pid, the
    group's id, is not given to another process, so the signal reaches no stranger."""
    if ended:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(REAP_S)
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(REAP_S)


def _read(  # noqa: PLR0917 - the two pipes, their buffers and the two bounds
    stdout: int, stderr: int, out: bytearray, error: bytearray, cap: int, timeout_s: float
) -> bool:
    """Read both pipes until both end (True), or until the cap or the time (False)."""
    stop_at = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ, out)
        selector.register(stderr, selectors.EVENT_READ, error)
        while selector.get_map():
            left = stop_at - time.monotonic()
            if left <= 0 or len(out) >= cap:
                return False
            for key, _ in selector.select(left):
                buffer: bytearray = key.data
                want = cap - len(out) if buffer is out else ERROR_BYTES
                chunk = os.read(key.fd, max(min(want, 1 << 16), 1))
                if not chunk:
                    selector.unregister(key.fd)
                elif buffer is out or len(error) < ERROR_BYTES:
                    buffer += chunk
    return True
