"""Other clients read what a real `placewatch run` publishes.

The official JavaScript client (npm `nats`, v2) as a gateway or alerting service in
JavaScript would use it, and the bare text protocol as `nats sub` shows it. The worker
runs against a real nats-server with a fake nvidia-smi; its one shard is a real process
placed on GPU 1 where it holds nothing, so a cpu_fallback fires.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from placewatch.schemas import FallbackEvent, decode

from tests.conftest import FIXTURES, FakeGpuTools, NatsServer, Worker
from tests.support.natsproto import RawSubscriber

SUBSCRIBER = Path(__file__).resolve().parents[1] / "support" / "subscribe.cjs"
NODE = "gpu-07.r1"  # travels as the subject token gpu-07=2Er1
SHARD = "llama-8b-a"
MiB = 1 << 20


@pytest.fixture(scope="session")
def nats_js(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """node_modules holding nats@2, installed once (kept in pytest's cache between runs)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to test the JavaScript client (npm package nats)")
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    where = cache.mkdir("nats-js-v2") if cache is not None else tmp_path_factory.mktemp("nats-js")
    installed = where / "node_modules" / "nats" / "package.json"
    if installed.is_file() and json.loads(installed.read_text())["version"].startswith("2."):
        return where / "node_modules"
    (where / "package.json").write_text('{"private": true}\n')
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "nats@2"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install nats@2 took over 180 s (no registry?)")
    if done.returncode != 0 or not installed.is_file():
        said = (done.stderr or done.stdout).strip().splitlines()[:2]
        pytest.skip(f"npm install nats@2 failed (no registry?): {' / '.join(said)}")
    return where / "node_modules"


@pytest.fixture
def fallback_worker_args(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, tmp_path: Path
) -> Iterator[tuple[str, ...]]:
    """`placewatch run` arguments for a node whose one shard computes on the CPU."""
    shard = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")  # no process holds any
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "{SHARD}"\npid = {shard.pid}\ngpus = [1]\n')
    yield (
        "--nats",
        nats_server.url,
        "--node",
        NODE,
        "--shards",
        str(shards),
        "--grace",
        "0",
        "--interval",
        "2",
        "--no-discover",
    )
    with contextlib.suppress(ProcessLookupError):
        os.killpg(shard.pid, signal.SIGKILL)
    shard.wait()


class Lines:
    """JSON lines from a child's stdout, each within a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout: float) -> Any:
        line = self.lines.get(timeout=max(timeout, 0.01))
        if line is None:
            raise EOFError("the subscriber exited")
        return json.loads(line)


def test_javascript_client_reads_telemetry_and_fallback_events(
    nats_js: Path,
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    fallback_worker_args: tuple[str, ...],
    workers: list[Worker],
) -> None:
    sub = subprocess.Popen(
        [
            "node",
            str(SUBSCRIBER),
            nats_server.url,
            "placewatch.telemetry.>",
            "placewatch.fallback.>",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NODE_PATH": str(nats_js)},
    )
    try:
        assert sub.stdout is not None and sub.stdin is not None
        lines = Lines(sub.stdout)
        assert lines.next(15) == {"ready": True}
        workers.append(Worker(*fallback_worker_args, env=fake_gpu.env()))
        seen: dict[str, Any] = {}
        deadline = time.monotonic() + 15
        while not {"telemetry", "fallback"} <= set(seen):
            msg = lines.next(deadline - time.monotonic())
            seen.setdefault(msg["subject"].split(".")[1], msg)
        sub.stdin.close()
        assert sub.wait(10) == 0
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
        stderr = sub.stderr.read() if sub.stderr else ""
        for pipe in (sub.stdin, sub.stdout, sub.stderr):
            if pipe is not None:
                pipe.close()
    assert stderr == ""

    telemetry = seen["telemetry"]
    assert telemetry["subject"] == "placewatch.telemetry.gpu-07=2Er1"
    assert telemetry["headers"]["Content-Type"] == "application/json"
    assert telemetry["headers"]["Placewatch-Type"] == "NodeTelemetry"
    assert telemetry["headers"]["Placewatch-Schema"] == "2"
    doc = telemetry["payload"]
    assert doc["node"] == NODE
    gpu0, gpu1 = doc["gpus"]
    assert gpu0["index"] == 0
    assert gpu0["utilization_pct"] == 37
    assert gpu0["memory_used_bytes"] == 40960 * MiB
    assert gpu0["temperature_c"] == 45
    assert gpu0["power_w"] == 212.34
    assert "utilization_pct" not in gpu1  # [N/A] is left out, never 0
    assert len(doc["inventory"]) == 12

    fallback = seen["fallback"]
    assert fallback["subject"] == f"placewatch.fallback.gpu-07=2Er1.{SHARD}"
    headers = fallback["headers"]
    assert headers["Content-Type"] == "application/json"
    assert headers["Placewatch-Type"] == "FallbackEvent"
    assert headers["Placewatch-Schema"] == "2"
    assert headers["Nats-Msg-Id"].startswith(f"gpu-07=2Er1.{SHARD}.{doc['session']}.")
    assert headers["Nats-Msg-Id"].endswith(".firing")
    event = fallback["payload"]
    assert event["state"] == "firing"
    status = event["status"]
    assert (status["node"], status["shard"], status["verdict"]) == (NODE, SHARD, "cpu_fallback")
    assert status["placed_gpus"] == [1]
    assert status["backend"] == "CPU"
    assert status["reason"].startswith("placed on GPU 1 but computing on the CPU")


def test_nats_sub_shows_a_fallback_event_with_headers_and_readable_json(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    fallback_worker_args: tuple[str, ...],
    workers: list[Worker],
) -> None:
    with RawSubscriber(nats_server.url, "placewatch.fallback.>") as sub:
        workers.append(Worker(*fallback_worker_args, env=fake_gpu.env()))
        msg = sub.next(timeout=15)
    # What `nats sub 'placewatch.fallback.>'` prints: the subject, the headers, the payload.
    shown = "\n".join(
        [
            f'[#1] Received on "{msg.subject}"',
            *(f"{k}: {v}" for k, v in msg.headers.items()),
            "",
            msg.payload.decode("utf-8"),
        ]
    )
    assert shown.startswith(f'[#1] Received on "placewatch.fallback.gpu-07=2Er1.{SHARD}"\n')
    assert "\nContent-Type: application/json\n" in shown
    assert "\nPlacewatch-Type: FallbackEvent\n" in shown
    assert "\nPlacewatch-Schema: 2\n" in shown
    assert f"\nNats-Msg-Id: gpu-07=2Er1.{SHARD}." in shown
    body = shown.split("\n\n", 1)[1]
    assert body.startswith('{"schema":2,"state":"firing","status":{')
    assert '"reason":"placed on GPU 1 but computing on the CPU' in body  # readable, unescaped
    event = decode(msg.payload, FallbackEvent, msg.headers)
    assert (event.status.node, event.status.shard) == (NODE, SHARD)
    assert event.status.verdict == "cpu_fallback"
