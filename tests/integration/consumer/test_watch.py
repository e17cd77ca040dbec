"""`placewatch watch`: the fleet from the bus, once as text or JSON, or live: text frames into
a pipe, the console on a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import queue
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import nats

from placewatch.consumer import FleetView, SharedGpu
from placewatch.consumer.snapshot import FleetState
from placewatch.consumer.watch.text import lines as board_lines
from placewatch.consumer.watch.watched import Watched
from placewatch.schemas import (
    ComputeStatus,
    GpuHealth,
    GpuSample,
    HostSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    encode,
    lean,
    subjects,
)

from tests.conftest import (
    FIXTURES,
    ROOT,
    FakeGpuTools,
    NatsServer,
    Worker,
    clean_env,
    free_port,
    placewatch_cmd,
    run_placewatch,
)
from tests.support.eventually import eventually_async
from tests.support.fleet_node import NODE, ShardNode
from tests.support.held import held

MIB = 1 << 20
WHEN = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def test_watch_once_json_shows_the_node_its_gpus_and_shards(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    done = run_placewatch("watch", "--once", "--json", "--nats", node.url, "--wait", "0.5")
    assert done.returncode == 0, done.stderr
    fleet = json.loads(done.stdout)
    (t,) = fleet["nodes"]
    assert t["node"] == NODE and not t["silent"] and t["problems"] == []
    assert [(g["index"], g["memory_used_bytes"]) for g in t["gpus"]] == [
        (0, 40960 * MIB),
        (1, 0),
    ]
    assert [(s["node"], s["shard"], s["verdict"]) for s in fleet["shards"]] == [
        (NODE, "idle", "cpu_fallback"),  # problems first
        (NODE, "holding", "gpu"),
    ]
    assert fleet["shards"][1]["used_gpus"] == [0]
    (firing,) = fleet["firing"]
    assert (firing["shard"], firing["verdict"]) == ("idle", "cpu_fallback")
    assert t["verdicts"] == {"cpu_fallback": 1, "gpu": 1}
    problems = run_placewatch("watch", "--once", "--problems", "--nats", node.url, "--wait", "0.5")
    assert problems.returncode == 1, problems.stderr  # something needs a person
    shards = [line for line in problems.stdout.splitlines() if not line.startswith("#")]
    assert [line.split()[:5] for line in shards[1:]] == [
        [NODE, "idle", "-", "cpu_fallback", "FIRING"]
    ]
    fine = run_placewatch(
        "watch", "--once", "--problems", "--shard", "hold*", "--nats", node.url, "--wait", "0.5"
    )
    assert fine.returncode == 0, fine.stdout  # nothing that matches needs a person
    node.stop()


def test_watch_exits_1_with_one_line_when_no_server_answers() -> None:
    started = time.monotonic()
    done = run_placewatch("watch", "--once", "--json", "--nats", f"nats://127.0.0.1:{free_port()}")
    assert done.returncode == 1
    assert time.monotonic() - started < 15
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("placewatch: cannot reach NATS at nats://127.0.0.1:")
    assert "nothing answers there" in line


def sample(node: str, time: datetime) -> NodeSample:
    return NodeSample(
        node=node,
        session="s1",
        seq=3,
        time=time,
        interval_s=2.0,
        gpus=[
            GpuSample(
                index=0,
                name="NVIDIA L4",
                utilization_pct=81.0,
                memory_total_bytes=23034 * MIB,
                memory_used_bytes=12288 * MIB,
                memory_free_bytes=10240 * MIB,
                foreign_bytes=2048 * MIB,
                temperature_c=61.0,
                power_w=55.2,
                power_cap_w=72.0,
            )
        ],
        host=HostSample(cpu_pct=12.0, cpu_count=32),
    )


def frame(
    samples: list[NodeSample],
    statuses: list[ComputeStatus],
    now: datetime,
    late_s: float = 0.0,
) -> list[str]:
    """What `watch --once` prints of these nodes and shards at `now`, each node's sample
    taken `late_s` after its time (a node whose clock is behind)."""
    state = FleetState()
    for s in samples:
        state.nodes[s.node], state.inventories[s.node] = held(s, late_s=late_s)
    for st in statuses:
        state.shards[(st.node, st.shard)] = st
    return board_lines(Watched(state, clock=now.timestamp).board(), now)


def test_once_prints_a_line_per_shard_problems_first_and_marks_firing_and_stale() -> None:
    fallen = ComputeStatus(
        node="edge-1",
        shard="qwen",
        session="s1",
        time=WHEN,
        placed_gpus=[0],
        verdict="cpu_fallback",
        reason="placed on GPU 0 but computing on the CPU",
        engine="llama_cpp",
    )
    fine = ComputeStatus(
        node="edge-1", shard="llama", session="s1", time=WHEN, placed_gpus=[0], verdict="gpu"
    )
    lines = frame([sample("edge-1", WHEN)], [fine, fallen], WHEN + timedelta(seconds=3))
    assert lines[1] == "# nodes 1 live, 0 silent  shards 2: 1 cpu_fallback, 1 gpu  1 firing"
    assert lines[3].split() == [
        "edge-1", "qwen", "llama_cpp", "cpu_fallback", "FIRING", "06:00:00Z", "0/-",
        "placed", "on", "GPU", "0", "but", "computing", "on", "the", "CPU",
    ]  # fmt: skip
    assert lines[4].split()[:5] == ["edge-1", "llama", "-", "gpu", "-"]
    silent = frame([sample("edge-1", WHEN)], [fine, fallen], WHEN + timedelta(seconds=30))
    assert silent[1].endswith("1 firing, 1 on silent nodes")
    assert [line.split()[1:5:3] for line in silent[3:5]] == [
        ["llama", "silent"],
        ["qwen", "FIRING,silent"],
    ]
    assert silent[-1] == "# node edge-1  silent 30 s"
    held_ = msgspec.structs.replace(fallen, stale=True, stale_since=WHEN - timedelta(seconds=8))
    stale = frame([sample("edge-1", WHEN)], [fine, held_], WHEN)
    assert stale[3].split()[4] == "FIRING,stale"


def test_a_node_whose_clock_is_off_or_whose_gpu_is_unhealthy_is_named() -> None:
    # Stamped 06:00 by a node whose clock is 40 s slow: it arrived at 06:00:40.
    lines = frame([sample("edge-1", WHEN)], [], WHEN + timedelta(seconds=42), late_s=40)
    assert lines[-1] == "# node edge-1  clock 40 s behind"
    on_time = frame([sample("edge-1", WHEN)], [], WHEN + timedelta(seconds=2), late_s=1.5)
    assert not any(line.startswith("# node ") for line in on_time)
    node = sample("edge-1", WHEN)
    sick = msgspec.structs.replace(
        node.gpus[0],
        health=GpuHealth(healthy=False, problems=["XID 79 (GPU has fallen off the bus): reset"]),
    )
    lines = frame([msgspec.structs.replace(node, gpus=[sick])], [], WHEN)
    assert lines[-1] == "# node edge-1  GPU 0 unhealthy: XID 79 (GPU has fallen off the bus): reset"


def test_watch_into_a_pipe_appends_a_frame_per_change_and_stops_on_sigterm(
    nats_server: NatsServer,
) -> None:
    async def publish(message: NodeTelemetry | NodeInventory | ComputeStatus, subject: str) -> None:
        nc = await nats.connect(nats_server.url)
        payload, headers = encode(message)
        await nc.publish(subject, payload, headers=headers)
        await nc.drain()

    proc = subprocess.Popen(
        [*placewatch_cmd(), "watch", "--nats", nats_server.url],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    everything: list[str] = []

    def read() -> None:
        for line in proc.stdout or []:
            everything.append(line)
            lines.put(line)

    reader = threading.Thread(target=read)
    reader.start()

    def wait_line(start: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if lines.get(timeout=0.2).startswith(start):
                    return
            except queue.Empty:
                pass
        raise AssertionError(f"no line starting {start!r}")

    try:
        wait_line("# no nodes yet")
        now = datetime.now(UTC)
        inventory, latest = lean.split(sample("edge-2", now))
        anyio.run(publish, inventory, subjects.inventory("edge-2"))
        anyio.run(publish, latest, subjects.telemetry("edge-2"))
        wait_line("# nodes 1 live, 0 silent")
        status = ComputeStatus(
            node="edge-2", shard="phi", session="s1", time=now, placed_gpus=[0], verdict="gpu"
        )
        anyio.run(publish, status, subjects.compute("edge-2", "phi"))
        wait_line("edge-2  phi")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert not any("\x1b[" in line for line in everything)  # not a terminal: plain frames
    assert sum(line.startswith("# placewatch  ") for line in everything) >= 3


WITHOUT_TEXTUAL = [
    sys.executable,
    "-c",
    "import sys; sys.modules['textual'] = None; from placewatch.cli import main; sys.exit(main())",
]
"""placewatch where Textual cannot be imported, as where the console extra is not installed."""


@contextmanager
def on_a_terminal(
    *args: str, cmd: list[str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`placewatch ARGS` with a 200x50 terminal as its stdin, stdout and stderr: the process
    and the terminal's other end, both ended after."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        [*(cmd or placewatch_cmd()), *args],
        env=clean_env() | {"TERM": "xterm-256color"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    try:
        yield proc, leader
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)


def read_until(leader: int, done: Callable[[bytes], bool], timeout: float = 15) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while not done(seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                seen += os.read(leader, 65536)
            except OSError:  # the process closed the terminal
                break
    return seen


def test_watch_plain_on_a_terminal_clears_and_redraws_in_place(nats_server: NatsServer) -> None:
    with on_a_terminal("watch", "--plain", "--nats", nats_server.url) as (proc, leader):
        seen = read_until(leader, lambda seen: seen.count(b"\x1b[H\x1b[2J") >= 2)
        # A frame a second even without a change: the ages move on.
        assert seen.count(b"\x1b[H\x1b[2J") >= 2
        assert seen.startswith(b"\x1b[H\x1b[2J# placewatch  ")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0


def test_without_textual_a_terminal_gets_the_text_board_and_how_to_get_the_console(
    nats_server: NatsServer,
) -> None:
    with on_a_terminal("watch", "--nats", nats_server.url, cmd=WITHOUT_TEXTUAL) as (proc, leader):
        seen = read_until(
            leader, lambda seen: seen.count(b"\x1b[H\x1b[2J") >= 1 and b"console" in seen
        )
        assert seen.startswith(b"\x1b[H\x1b[2J# placewatch  ")
        assert b"# Textual is not installed: pip install 'placewatch[console]'" in seen
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0


def test_watch_on_a_terminal_is_the_console_and_q_quits(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    with on_a_terminal("watch", "--nats", node.url) as (proc, leader):
        seen = read_until(leader, lambda seen: b"cpu_fallback" in seen and b"FIRING" in seen)
        assert b"\x1b[?1049h" in seen  # the alternate screen: a full-screen console
        assert b"firing" in seen and b"idle" in seen  # the header, and the shard
        os.write(leader, b"q")
        assert proc.wait(10) == 0
    node.stop()


def test_two_workers_on_one_machine_under_two_names_are_named_and_its_gpus_offered_once(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, workers: list[Worker]
) -> None:
    # A systemd unit (the host's name) and a DaemonSet (the Kubernetes node's) on one machine.
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")
    for name in ("gpu-07", "gpu-07.cluster.local"):
        args = ("--nats", nats_server.url, "--node", name, "--no-discover", "--interval", "0.5")
        workers.append(Worker(*args, env=fake_gpu.env()))

    async def view() -> tuple[list[SharedGpu], list[str]]:
        nc = await nats.connect(nats_server.url)
        fleet = FleetView(nc)
        try:
            await fleet.start()
            await eventually_async(lambda: len(fleet.snapshot().nodes) == 2, 15)
            return fleet.shared_gpus(), [c.node for c in fleet.gpus_for(0)]
        finally:
            await fleet.stop()
            await nc.close()

    shared, offered = anyio.run(view, backend="asyncio")
    assert [(s.nodes, s.gpus) for s in shared] == [
        (["gpu-07", "gpu-07.cluster.local"], [0, 0]),
        (["gpu-07", "gpu-07.cluster.local"], [1, 1]),
    ]
    assert len(offered) == 2  # two GPUs, not four
    done = run_placewatch("watch", "--once", "--nats", nats_server.url, "--wait", "1")
    assert done.returncode == 0, done.stderr
    said = {line.split()[2]: line for line in done.stdout.splitlines() if "SHARED" in line}
    assert sorted(said) == ["gpu-07", "gpu-07.cluster.local"], done.stdout
    for this, other in (("gpu-07", "gpu-07.cluster.local"), ("gpu-07.cluster.local", "gpu-07")):
        for i, s in enumerate(shared):
            assert (
                f"SHARED GPU {i} ({s.uuid}) is also {other} GPU {i}: two workers watch one "
                "machine under two names; stop one, or give both one --node"
            ) in said[this]
    example = ROOT / "docs" / "examples" / "place.py"
    placed = subprocess.run(
        [sys.executable, str(example), nats_server.url, "--bytes", "1GiB"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert placed.returncode == 0, placed.stderr
    assert [line for line in placed.stdout.splitlines() if line.startswith("shared:")] == [
        f"shared: {s.uuid} is reported by gpu-07, gpu-07.cluster.local" for s in shared
    ]
    assert len([line for line in placed.stdout.splitlines() if " GiB free" in line]) == 2
