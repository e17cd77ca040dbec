"""`placewatch watch`: the fleet from the bus, once as JSON, or live."""

from __future__ import annotations

import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import nats

from placewatch.consumer import FiringFallback, Fleet, FleetView, SharedGpu
from placewatch.consumer.terminal import render
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
from tests.support.fleet_node import HOLDING_MIB, NODE, ShardNode

MIB = 1 << 20
WHEN = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def test_watch_once_json_shows_the_node_its_gpus_and_shards(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    done = run_placewatch("watch", "--once", "--json", "--nats", node.url, "--wait", "0.5")
    assert done.returncode == 0, done.stderr
    fleet = json.loads(done.stdout)
    (t,) = fleet["nodes"]
    assert t["node"] == NODE
    assert [(g["index"], g["memory_free_bytes"]) for g in t["gpus"]] == [
        (0, 40405 * MIB),
        (1, 81365 * MIB),
    ]
    assert t["gpus"][0]["foreign_bytes"] == (40960 - HOLDING_MIB) * MIB
    assert [(s["node"], s["shard"], s["verdict"]) for s in fleet["shards"]] == [
        (NODE, "holding", "gpu"),
        (NODE, "idle", "cpu_fallback"),
    ]
    (firing,) = fleet["firing"]
    assert (firing["shard"], firing["verdict"]) == ("idle", "cpu_fallback")
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


def test_frame_shows_each_gpu_and_marks_firing_fallbacks() -> None:
    fallen = ComputeStatus(
        node="edge-1",
        shard="qwen",
        session="s1",
        time=WHEN,
        placed_gpus=[0],
        verdict="cpu_fallback",
        reason="placed on GPU 0 but computing on the CPU",
    )
    fine = ComputeStatus(
        node="edge-1", shard="llama", session="s1", time=WHEN, placed_gpus=[0], verdict="gpu"
    )
    fleet = Fleet(
        nodes=[sample("edge-1", WHEN)],
        shards=[fine, fallen],
        firing=[
            FiringFallback(
                node="edge-1", shard="qwen", verdict="cpu_fallback", since=WHEN, reason=""
            )
        ],
    )
    lines = render(fleet, WHEN + timedelta(seconds=3)).splitlines()
    assert lines[0].endswith("1 node  2 shards  1 firing")
    assert lines[2].startswith("edge-1  seen 3 s ago  session s1  cpu 12% of 32")
    gpu = lines[4].split()
    assert gpu == ["0", "81%", "12.0", "2.0", "10.0", "61", "C", "55/72", "NVIDIA", "L4"]
    assert lines[5] == "  shard llama  gpu  placed 0  pid -"
    assert lines[6] == (
        "  shard qwen  FIRING cpu_fallback  placed 0  pid -  "
        "placed on GPU 0 but computing on the CPU"
    )
    stale = render(fleet, WHEN + timedelta(seconds=30)).splitlines()
    assert "STALE" in stale[2]
    held = msgspec.structs.replace(fallen, stale=True, stale_since=WHEN - timedelta(seconds=8))
    lines = render(msgspec.structs.replace(fleet, shards=[fine, held]), WHEN).splitlines()
    assert lines[6].startswith(
        "  shard qwen  FIRING cpu_fallback (stale since 05:59:52Z: evidence lost)  placed 0"
    )


def test_frame_ages_a_node_by_its_arrival_and_names_a_clock_that_is_off() -> None:
    # Stamped 06:00 by a node whose clock is 40 s slow: it arrived at 06:00:40.
    arrived = (WHEN + timedelta(seconds=40)).timestamp()
    fleet = Fleet(nodes=[sample("edge-1", WHEN)], shards=[], firing=[], seen={"edge-1": arrived})
    line = render(fleet, WHEN + timedelta(seconds=42)).splitlines()[2]
    assert line.startswith("edge-1  seen 2 s ago  CLOCK 40 s behind  session s1"), line
    later = render(fleet, WHEN + timedelta(seconds=47)).splitlines()[2]
    assert later.startswith("edge-1  seen 7 s ago  STALE  CLOCK 40 s behind"), later
    on_time = msgspec.structs.replace(fleet, seen={"edge-1": WHEN.timestamp() + 1.5})
    assert "CLOCK" not in render(on_time, WHEN + timedelta(seconds=2))


def test_frame_marks_an_unhealthy_gpu_and_the_shards_on_it() -> None:
    node = sample("edge-1", WHEN)
    sick = msgspec.structs.replace(
        node.gpus[0],
        health=GpuHealth(healthy=False, problems=["XID 79 (GPU has fallen off the bus): reset"]),
    )
    on_it = ComputeStatus(
        node="edge-1",
        shard="llama",
        session="s1",
        time=WHEN,
        placed_gpus=[0],
        verdict="gpu",
        unhealthy_gpus=[0],
    )
    fleet = Fleet(nodes=[msgspec.structs.replace(node, gpus=[sick])], shards=[on_it], firing=[])
    lines = render(fleet, WHEN).splitlines()
    assert lines[4].split()[:2] == ["0", "81%"]
    assert lines[5] == "       UNHEALTHY: XID 79 (GPU has fallen off the bus): reset"
    assert lines[6] == "  shard llama  gpu  placed 0  pid -  on unhealthy GPU 0"


def test_a_frame_holds_no_control_character_whatever_a_node_published() -> None:
    # Any node may publish any text on its own subjects: a title change, a clipboard write,
    # text reversed by a bidirectional override.
    hostile = ComputeStatus(
        node="edge-1",
        shard="q\x1b]52;c;ZXZpbA==\x07",
        session="s1",
        time=WHEN,
        verdict="unknown",
        reason="\x1b[2J\u202egnp.exe\x9b",
    )
    frame = render(Fleet(nodes=[sample("edge-1", WHEN)], shards=[hostile], firing=[]), WHEN)
    assert all(line.isprintable() for line in frame.splitlines())
    assert "  shard q?]52;c;ZXZpbA==?  unknown  placed cpu  pid -  ?[2J?gnp.exe?" in frame


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
        wait_line("no nodes yet")
        now = datetime.now(UTC)
        inventory, latest = lean.split(sample("edge-2", now))
        anyio.run(publish, inventory, subjects.inventory("edge-2"))
        anyio.run(publish, latest, subjects.telemetry("edge-2"))
        wait_line("edge-2  seen")
        status = ComputeStatus(
            node="edge-2", shard="phi", session="s1", time=now, placed_gpus=[0], verdict="gpu"
        )
        anyio.run(publish, status, subjects.compute("edge-2", "phi"))
        wait_line("  shard phi  gpu")
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
    assert sum(line.startswith("placewatch  ") for line in everything) >= 3


def test_watch_on_a_terminal_clears_and_redraws_in_place(nats_server: NatsServer) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*placewatch_cmd(), "watch", "--nats", nats_server.url],
        env=clean_env(),
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    try:
        seen = b""
        deadline = time.monotonic() + 10
        while seen.count(b"\x1b[H\x1b[2J") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                seen += os.read(leader, 65536)
        # A frame a second even without a change: the ages move on.
        assert seen.count(b"\x1b[H\x1b[2J") >= 2
        assert seen.startswith(b"\x1b[H\x1b[2Jplacewatch  ")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
        proc.stderr.close()  # type: ignore[union-attr]


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
    said = [line for line in done.stdout.splitlines() if "SHARED" in line]
    assert said == [
        f"  SHARED GPU {i} ({s.uuid}) is also {other} GPU {i}: two workers watch one machine "
        "under two names; stop one, or give both one --node"
        for other in ("gpu-07.cluster.local", "gpu-07")
        for i, s in enumerate(shared)
    ], done.stdout
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
