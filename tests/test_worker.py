"""`placewatch run` against a real nats-server, read by a bare text-protocol subscriber."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import anyio
import msgspec

from placewatch.bus import Publisher, connect
from placewatch.host import HostSampler
from placewatch.outbox import EventOutbox
from placewatch.runtime import Worker as RuntimeWorker
from placewatch.runtime import follow_logs
from placewatch.sampler import NodeSampler
from placewatch.schemas import NodeTelemetry, decode
from placewatch.shards.events import EventTracker
from placewatch.shards.watch import ShardWatch

from .conftest import FIXTURES, FakeGpuTools, NatsServer, Worker, clean_env, free_port
from .natsproto import RawSubscriber

MiB = 1 << 20


def test_worker_publishes_json_telemetry_and_stops_on_sigterm(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, workers: list[Worker]
) -> None:
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv",
        FIXTURES / "nvidia-smi" / "a100x2-query-compute-apps.csv",
    )
    with RawSubscriber(nats_server.url, "placewatch.telemetry.>") as sub:
        started = time.monotonic()
        worker = Worker(
            "--nats", nats_server.url, "--node", "N", "--interval", "1", env=fake_gpu.env()
        )
        workers.append(worker)
        first = sub.next(timeout=3)
        assert time.monotonic() - started < 3
        second = sub.next(timeout=3)
    assert first.subject == "placewatch.telemetry.N"
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["Placewatch-Type"] == "NodeTelemetry"
    assert first.headers["Placewatch-Schema"] == "1"
    doc = first.json()
    assert isinstance(doc, dict)
    assert doc["node"] == "N"
    assert doc["interval_s"] == 1.0
    assert doc["gpus"][0]["memory_used_bytes"] == 40960 * MiB
    assert doc["gpus"][1]["utilization_pct"] is None
    assert doc["sources"][0]["ok"] is True
    later = second.json()
    assert isinstance(later, dict)
    assert later["seq"] == doc["seq"] + 1
    assert later["session"] == doc["session"]

    code, took, _, err = worker.stop()
    assert code == 0, err
    assert took < 5


def test_node_names_become_subject_tokens(nats_server: NatsServer, workers: list[Worker]) -> None:
    with RawSubscriber(nats_server.url, "placewatch.telemetry.*") as sub:
        workers.append(
            Worker(
                "--nats",
                nats_server.url,
                "--node",
                "rack 4.gpu*7",
                "--interval",
                "1",
                env=clean_env(),
            )
        )
        msg = sub.next(timeout=5)
    assert msg.subject == "placewatch.telemetry.rack_4_gpu_7"
    doc = msg.json()
    assert isinstance(doc, dict)
    assert doc["node"] == "rack 4.gpu*7"
    assert doc["gpus"] == []
    errors = {s["name"]: s["error"] for s in doc["sources"]}
    assert errors["nvidia-smi"] == "nvidia-smi not found on PATH"


def test_msgpack_encoding_is_labelled_and_decodes(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    env = clean_env() | {"PLACEWATCH_ENCODING": "msgpack", "PLACEWATCH_PREFIX": "pw"}
    with RawSubscriber(nats_server.url, "pw.telemetry.n2") as sub:
        workers.append(
            Worker("--nats", nats_server.url, "--node", "n2", "--interval", "1", env=env)
        )
        msg = sub.next(timeout=5)
    assert msg.headers["Content-Type"] == "application/msgpack"
    telemetry = decode(msg.payload, NodeTelemetry, msg.headers)
    assert telemetry.node == "n2"
    assert msgspec.msgpack.decode(msg.payload)["node"] == "n2"


def test_embedded_server_when_none_is_configured(tmp_path: Path, workers: list[Worker]) -> None:
    env = clean_env() | {"PLACEWATCH_STATE_DIR": str(tmp_path / "state")}
    worker = Worker("--node", "solo", "--interval", "1", env=env)
    workers.append(worker)
    assert worker.proc.stdout is not None
    line = worker.proc.stdout.readline()
    found = re.search(r"nats://127\.0\.0\.1:(\d+)", line)
    assert found, line
    url = found.group(0)
    with RawSubscriber(url, "placewatch.telemetry.solo") as sub:
        msg = sub.next(timeout=5)
    doc = msg.json()
    assert isinstance(doc, dict)
    assert doc["node"] == "solo"
    assert (tmp_path / "state" / "jetstream").is_dir()

    code, took, _, err = worker.stop()
    assert code == 0, err
    assert took < 5
    port = int(found.group(1))
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        still_listening = True
    except OSError:
        still_listening = False
    assert not still_listening, "the embedded server outlived the worker"


def test_server_down_at_start_is_retried_with_a_log_line(
    tmp_path: Path, workers: list[Worker]
) -> None:
    server = NatsServer(tmp_path / "js", port=free_port())
    worker = Worker("--nats", server.url, "--node", "late", "--interval", "1", env=clean_env())
    workers.append(worker)
    time.sleep(2)
    assert worker.proc.poll() is None, "the worker gave up while the server was down"
    server.start()
    try:
        with RawSubscriber(server.url, "placewatch.telemetry.late") as sub:
            doc = sub.next(timeout=6).json()
        assert isinstance(doc, dict)
        assert doc["node"] == "late"
        code, _, _, err = worker.stop()
    finally:
        server.stop()
    assert code == 0
    failures = [line for line in err.splitlines() if "cannot reach NATS" in line]
    assert len(failures) == 1, err
    assert server.url in failures[0]
    assert "Traceback" not in err


def test_embedded_server_dies_with_a_killed_worker(tmp_path: Path, workers: list[Worker]) -> None:
    env = clean_env() | {"PLACEWATCH_STATE_DIR": str(tmp_path / "state")}
    worker = Worker("--node", "doomed", "--embedded-port", "0", env=env)
    workers.append(worker)
    assert worker.proc.stdout is not None
    found = re.search(r"nats://127\.0\.0\.1:(\d+)", worker.proc.stdout.readline())
    assert found
    port = int(found.group(1))
    socket.create_connection(("127.0.0.1", port), 1).close()
    worker.kill()  # SIGKILL: no chance to stop the server itself
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError("the embedded server outlived a killed worker")


def test_with_no_log_to_follow_the_log_loop_wakes_with_the_ticks_only(
    nats_server: NatsServer,
) -> None:
    watch = ShardWatch("n1", "s1", discovery=False)
    looks: list[float] = []
    following = watch.following

    def counted() -> bool:
        looks.append(time.monotonic())
        return following()

    watch.following = counted  # type: ignore[method-assign]

    async def main() -> tuple[int, float]:
        nc = await connect([nats_server.url], "test worker")
        sampler = NodeSampler("n1", 2.0, [], HostSampler(), session="s1", watch=watch)
        worker = RuntimeWorker(
            sampler, EventTracker("n1", "s1"), Publisher(nc, "placewatch"), EventOutbox(nc)
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_logs, watch, worker)
            await anyio.sleep(2.5)
            idle = len(looks)
            await worker.tick()
            ticked = time.monotonic()
            await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
        await nc.close()
        return idle, ticked

    idle, ticked = anyio.run(main, backend="asyncio")
    assert idle == 1  # looked once at the start, then waited for a tick, not a clock
    assert [t for t in looks if t >= ticked], "the loop did not look again after the tick"
