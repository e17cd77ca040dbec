"""`placewatch run` against a real nats-server, read by a bare text-protocol subscriber."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from placewatch.connection import connect
from placewatch.schemas import NodeTelemetry, decode
from placewatch.worker import runtime
from placewatch.worker.bus.events import EventTracker
from placewatch.worker.bus.outbox import EventOutbox
from placewatch.worker.bus.publish import Publisher
from placewatch.worker.engines.evidence import follow
from placewatch.worker.engines.evidence.follow import EngineLogs
from placewatch.worker.host import HostSampler
from placewatch.worker.pipeline import Pipeline
from placewatch.worker.runtime import Worker as Worker_
from placewatch.worker.sampler import NodeSampler
from placewatch.worker.shards.placements import ShardsFile
from placewatch.worker.shards.shard_pass import ShardPass

from tests.conftest import FIXTURES, FakeGpuTools, NatsServer, Worker, clean_env, free_port
from tests.support.eventually import eventually_async
from tests.support.natsproto import RawSubscriber

MiB = 1 << 20


def test_worker_publishes_json_telemetry_and_stops_on_sigterm(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, workers: list[Worker]
) -> None:
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv",
        FIXTURES / "nvidia-smi" / "a100x2-query-compute-apps.csv",
    )
    with RawSubscriber(nats_server.url, "placewatch.telemetry.>") as sub:
        worker = Worker(
            "--nats", nats_server.url, "--node", "N", "--interval", "1", env=fake_gpu.env()
        )
        workers.append(worker)
        first = sub.next(timeout=30)  # after the worker's start: imports, the bus
        second = sub.next(timeout=3)
    assert first.subject == "placewatch.telemetry.N"
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["Placewatch-Type"] == "NodeTelemetry"
    assert first.headers["Placewatch-Schema"] == "2"
    doc = first.json()
    assert isinstance(doc, dict)
    assert doc["node"] == "N"
    assert doc["interval_s"] == 1.0
    assert doc["gpus"][0]["memory_used_bytes"] == 40960 * MiB
    assert "utilization_pct" not in doc["gpus"][1]  # the tool said [N/A]: unknown, not 0
    assert doc["sources"][0]["ok"] is True
    later = second.json()
    assert isinstance(later, dict)
    assert later["seq"] == doc["seq"] + 1
    assert later["session"] == doc["session"]

    code, _, _, err = worker.stop()  # -1 unless it exits within 5 s
    assert code == 0, err


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
    assert msg.subject == "placewatch.telemetry.rack=204=2Egpu=2A7"
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

    code, _, _, err = worker.stop()  # -1 unless it exits within 5 s
    assert code == 0, err
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
    worker.wait_for("cannot reach NATS")
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


def test_a_worker_stopped_while_its_server_is_down_exits_0(
    tmp_path: Path, workers: list[Worker]
) -> None:
    server = NatsServer(tmp_path / "js")
    server.start()
    try:
        worker = Worker("--nats", server.url, "--node", "n1", "--interval", "1", env=clean_env())
        workers.append(worker)
        with RawSubscriber(server.url, "placewatch.telemetry.n1") as sub:
            sub.next(timeout=10)
    finally:
        server.stop()
    worker.wait_for("disconnected from NATS")  # it publishes into nats-py's buffer meanwhile
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert "disconnected from NATS" in err


def run_worker(
    url: str, shards: ShardPass, body: Callable[[Worker_, list[NodeTelemetry]], Awaitable[None]]
) -> None:
    async def main() -> None:
        nc = await connect([url], "test worker")
        published: list[NodeTelemetry] = []

        class Keeping(Publisher):
            async def telemetry(self, message: NodeTelemetry) -> bool:
                published.append(message)
                return True

        pipeline = Pipeline("n1", 10.0, NodeSampler([], HostSampler()), shards, session="s1")
        worker = Worker_(
            pipeline, EventTracker("n1", "s1"), Keeping(nc, "placewatch"), EventOutbox(nc)
        )
        try:
            async with anyio.create_task_group() as tg:
                if shards.logs is not None:
                    await tg.start(shards.logs.run)
                    tg.start_soon(runtime._tick_on_new_evidence, shards.logs, worker)
                await tg.start(worker.run, 10.0)
                await body(worker, published)
                tg.cancel_scope.cancel()
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")


def test_a_recheck_is_one_tick_that_returns_once_it_is_over(nats_server: NatsServer) -> None:
    async def body(worker: Worker_, published: list[NodeTelemetry]) -> None:
        await eventually_async(lambda: len(published) == 1)
        started = time.monotonic()
        await worker.recheck()
        assert [t.seq for t in published] == [0, 1]
        assert time.monotonic() - started < 2  # not the 10 s interval
        # Asked ticks leave the cadence: nothing more until the interval is up.
        await anyio.sleep(0.5)
        assert len(published) == 2

    run_worker(nats_server.url, ShardPass("n1", "s1", discovery=False), body)


def test_a_log_that_says_something_new_asks_for_a_tick_and_an_idle_one_does_not(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[float] = []
    read_all = follow._read_all

    def counted(followed: Any, stop_at: float, turn: int) -> bool:
        looks.append(time.monotonic())
        return read_all(followed, stop_at, turn)

    monkeypatch.setattr(follow, "_read_all", counted)
    log = tmp_path / "engine.log"
    log.write_text("")
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {os.getpid()}\ngpus = [0]\nlog_path = "{log}"\n')

    async def body(worker: Worker_, published: list[NodeTelemetry]) -> None:
        await eventually_async(lambda: len(published) == 1)
        assert published[0].shards["a"].verdict == "unknown"  # no GPU tool, no engine word
        log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")
        said = time.monotonic()
        await eventually_async(lambda: len(published) == 2)
        assert time.monotonic() - said < 1  # within LOG_POLL_S, not the 10 s interval
        assert published[1].shards["a"].verdict == "cpu_fallback"

    run_worker(
        nats_server.url,
        ShardPass(
            "n1",
            "s1",
            grace_s=0,
            shards_file=ShardsFile(shards),
            discovery=False,
            logs=EngineLogs(),
        ),
        body,
    )
    assert looks, "the log was never read"

    # With no log to follow, EngineLogs waits for the next tick to ask: no looks of its own.
    looks.clear()

    async def idle(worker: Worker_, published: list[NodeTelemetry]) -> None:
        await anyio.sleep(1.0)

    run_worker(nats_server.url, ShardPass("n1", "s1", discovery=False, logs=EngineLogs()), idle)
    assert looks == []
