"""A real llama.cpp `llama-server`, started on the tiny model for a test and stopped after it.

The binary is PLACEWATCH_TEST_LLAMA_SERVER, by default /tmp/lcb/build/bin/llama-server
(where a CPU-only build of b11434 was made for these tests); a test that needs it skips,
saying so, when it is not there. Tests that read what a CPU-only build says (llama.cpp
prints "warning: no usable GPU found, --gpu-layers option will be ignored" for `-ngl 99`)
skip on a build that lists a GPU in `--list-devices`.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import pytest

from placewatch.shards.engine_log.read import read_text

from tests.conftest import free_port

LLAMA_SERVER = Path(
    os.environ.get("PLACEWATCH_TEST_LLAMA_SERVER", "/tmp/lcb/build/bin/llama-server")
)
START_S = 30.0
"""How long a server may take to load the tiny model and answer /health (0.2 s here)."""

Output = int | IO[bytes] | None
"""Where its stdout or stderr goes, as subprocess takes it."""


def needs_llama_server() -> Path:
    """The binary; the test skips, saying why, when it is missing."""
    if not (LLAMA_SERVER.is_file() and os.access(LLAMA_SERVER, os.X_OK)):
        pytest.skip(
            f"no llama-server at {LLAMA_SERVER}: build llama.cpp (CPU is enough) and set "
            "PLACEWATCH_TEST_LLAMA_SERVER to its build/bin/llama-server"
        )
    return LLAMA_SERVER


def needs_cpu_only_build() -> Path:
    """The binary, when it is a build without a GPU backend; else the test skips."""
    binary = needs_llama_server()
    listed = _list_devices(str(binary))
    if listed:
        pytest.skip(
            f"{binary} lists GPU devices ({', '.join(listed)}): these tests need a CPU-only build"
        )
    return binary


@functools.cache
def _list_devices(binary: str) -> tuple[str, ...]:
    """The GPU devices a build lists, read as doctor reads them."""
    done = subprocess.run(
        [binary, "--list-devices"], capture_output=True, text=True, timeout=60, check=False
    )
    return read_text(done.stdout + done.stderr).found_devices


class LlamaServers:
    """The servers one test started: each stopped with SIGINT, as a person stops it, and
    killed if it has not exited 5 s later."""

    def __init__(self, model: Path) -> None:
        self.model = model
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        *args: str,
        stdout: Output = subprocess.DEVNULL,
        stderr: Output = subprocess.DEVNULL,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> tuple[subprocess.Popen[bytes], int]:
        """A server on a free loopback port, ready (its /health answers 200); and the port.
        `env` is added to this environment."""
        port = free_port()
        argv = [str(needs_llama_server()), "-m", str(self.model)]
        argv += ["--host", "127.0.0.1", "--port", str(port), *args]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env={**os.environ, **(env or {})},
        )
        self.procs.append(proc)
        deadline = time.monotonic() + START_S
        while not _healthy(port):
            if proc.poll() is not None:
                raise AssertionError(f"llama-server exited {proc.returncode}: {argv}")
            assert time.monotonic() < deadline, f"llama-server not ready in {START_S} s: {argv}"
            time.sleep(0.05)
        return proc, port

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return int(r.status) == 200
    except (OSError, urllib.error.URLError):
        return False
