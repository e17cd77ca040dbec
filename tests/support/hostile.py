"""A local user without privileges (`nobody`) attacking the worker through its engine logs.

The worker runs as root and reads what other users' processes write. These helpers start
processes as `nobody` (setpriv, as CI runs as root), in a folder that `nobody` owns, and
record every message a real nats-server carries while they try.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.support.eventually import eventually
from tests.support.natsproto import Message, RawSubscriber

NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
NOBODY_UID = 65534

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="the attacker runs as nobody: the test runs as root with setpriv (as CI does)",
)

BANNER = "build: 5400 (1a2b3c4d) with cc (GCC) 13.2.0 for x86_64-linux-gnu"
ON_GPU = "load_tensors: offloaded 33/33 layers to GPU"
IDLE = "srv  update_slots: all slots are idle"
ENGINE = f"""
import sys, time
print({BANNER!r}, file=sys.stderr, flush=True)
print({ON_GPU!r}, file=sys.stderr, flush=True)
while True:
    time.sleep(0.2)
    print({IDLE!r}, file=sys.stderr, flush=True)
"""
"""An engine that says it offloaded every layer, then a line every 0.2 s, on its stderr."""


@contextlib.contextmanager
def nobody_folder() -> Iterator[Path]:
    """A folder `nobody` owns, where every folder above it may be entered by anyone."""
    folder = Path(tempfile.mkdtemp(prefix="placewatch-nobody-", dir="/tmp"))
    os.chown(folder, NOBODY_UID, NOBODY_UID)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def root_secret(folder: Path, text: str) -> Path:
    """A root-only (0600) file holding `text`, in `folder`."""
    secret = folder / "secret.txt"
    secret.write_text(text)
    secret.chmod(0o600)
    return secret


def as_nobody(argv: list[str], **popen: object) -> subprocess.Popen[bytes]:
    """`argv` run as nobody, in a session of its own; returned once it runs as nobody."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        [*NOBODY, *argv], start_new_session=True, **popen
    )

    def dropped() -> bool:
        try:
            process = psutil.Process(proc.pid)
            return process.uids().effective == NOBODY_UID and process.cmdline()[:1] == argv[:1]
        except (psutil.Error, IndexError):
            return proc.poll() is not None

    eventually(dropped, what=f"{argv[0]} running as nobody")
    return proc


def nobody_engine(
    folder: Path, log: Path, port: int, env: dict[str, str], code: str = ENGINE
) -> subprocess.Popen[bytes]:
    """A llama-server (by its name) run by nobody, its stderr appended to `log`, which nobody
    owns."""
    link = folder / "llama-server"
    if not link.exists():
        link.symlink_to(sys.executable)
    log.touch()
    os.chown(log, NOBODY_UID, NOBODY_UID)
    with log.open("ab") as err:
        return as_nobody(
            [str(link), "-c", code, "-m", "m.gguf", "--port", str(port), "-ngl", "99"],
            stderr=err,
            stdout=subprocess.DEVNULL,
            env=env,
        )


def nobody_runs(code: str) -> None:
    """Python `code` run to its end as nobody (what the attacker does to its own files)."""
    subprocess.run([*NOBODY, sys.executable, "-c", code], check=True, timeout=30)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


@dataclass
class Recorder:
    """Every message the server carries on `subject`, kept with when it arrived, by a thread."""

    url: str
    subject: str = ">"
    messages: list[tuple[float, Message]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Recorder:
        sub = RawSubscriber(self.url, self.subject)

        def run() -> None:
            with sub:
                while not self._stop.is_set():
                    try:
                        message = sub.next(0.2)
                    except (TimeoutError, ConnectionError, OSError):
                        continue
                    self.messages.append((time.monotonic(), message))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def arrivals(self, subject: str) -> list[float]:
        return [at for at, m in self.messages if m.subject == subject]

    def everything(self) -> bytes:
        return b"\n".join(m.subject.encode() + b" " + m.payload for _, m in self.messages)
