"""Real processes as shards, a fake nvidia-smi naming their real pids, a real nats-server.

`placewatch run --shards FILE --grace 1 --interval 1`, read back from the stream
and by a bare subscriber.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.js.errors
import psutil
import pytest

from placewatch.schemas import ComputeStatus, FallbackEvent, decode_any
from placewatch.schemas.streams import EVENTS, PLACEMENTS

from tests.conftest import (
    FIXTURES,
    GPU0,
    GPU1,
    PARENT,
    SLEEP,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    run_placewatch,
    start,
    wait_older_than,
)
from tests.support.eventually import answered, eventually
from tests.support.natsproto import RawSubscriber


async def stream_events(url: str) -> list[Any]:
    """Every message in the events stream, oldest first."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(EVENTS.name)
        except nats.js.errors.NotFoundError:
            return []  # the worker has not created it yet
        found: list[Any] = []
        if not info.state.messages:
            return found
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(EVENTS.name, seq)
            found.append(decode_any(msg.data or b"", msg.headers or {}))
        return found
    finally:
        await nc.close()


def events_now(url: str) -> list[tuple[str, str, str]] | None:
    """The events stream's summary, or None when the server could not say just now (a
    stream electing its leader, a server that has just come back): a poll asks again."""
    try:
        return summary(anyio.run(stream_events, url, backend="asyncio"))
    except (nats.errors.Error, TimeoutError, asyncio.CancelledError):
        return None


def summary(events: list[Any]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for e in events:
        if isinstance(e, FallbackEvent):
            out.append(("fallback", e.status.shard, e.state))
        elif isinstance(e, ComputeStatus):
            out.append(("compute", e.shard, e.verdict))
    return out


def wait_for_events(url: str, predicate: Any, timeout: float = 15) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []

    def arrived() -> bool:
        seen[:] = summary(anyio.run(stream_events, url, backend="asyncio"))
        return bool(predicate(seen))

    eventually(arrived, timeout, every=0.3, what="the events awaited")
    return seen


async def put(url: str, key: str, value: bytes | None) -> None:
    """A placement written to (or, None, deleted from) the placements bucket, once the worker
    has created it."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        kv = await answered(lambda: js.key_value(PLACEMENTS.name), what="the placements bucket")
        if value is None:
            await kv.delete(key)
        else:
            await kv.put(key, value)
    finally:
        await nc.close()


# msgpack: the statuses a session leaves in the compute bucket are msgpack too, and the next
# session must read them (bucket values carry no Content-Type).
@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_verdicts_events_and_resolution_end_to_end(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
    *,
    encoding: str,
) -> None:
    holding = start(shard_procs, "holding")
    idle = start(shard_procs, "idle")
    stray = start(shard_procs, "stray")
    parent = start(shard_procs, "parent", PARENT)
    deadline = time.monotonic() + 5
    while not psutil.Process(parent).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = psutil.Process(parent).children()[0].pid
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv",
        apps({holding: (GPU0, 30000), stray: (GPU0, 8000), child: (GPU1, 12000)}),
    )
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "holding"\npid = {holding}\ngpus = [0]\n\n'
        f'[[shard]]\nid = "idle"\npid = {idle}\ngpus = [1]\n\n'
        f'[[shard]]\nid = "stray"\npid = {stray}\ngpus = [1]\n\n'
        f'[[shard]]\nid = "parent"\npid = {parent}\ngpus = [1]\n'
    )
    wait_older_than([holding, idle, stray, parent], 1.2)
    args = (
        "--nats",
        nats_server.url,
        "--node",
        "n1",
        "--shards",
        str(shards),
        "--grace",
        "1",
        "--interval",
        "1",
        "--no-discover",
        "--encoding",
        encoding,
    )
    worker = Worker(*args, env=fake_gpu.env())
    workers.append(worker)

    first = wait_for_events(nats_server.url, lambda s: len(s) >= 6)
    assert sorted(first) == sorted(
        [
            ("compute", "holding", "gpu"),
            ("compute", "idle", "cpu_fallback"),
            ("fallback", "idle", "firing"),
            ("compute", "stray", "misplaced"),
            ("fallback", "stray", "firing"),
            ("compute", "parent", "gpu"),  # its child holds the memory
        ]
    )
    events = anyio.run(stream_events, nats_server.url, backend="asyncio")
    by_shard = {e.shard: e for e in events if isinstance(e, ComputeStatus)}
    assert by_shard["idle"].reason.startswith("placed on GPU 1 but computing on the CPU")
    assert by_shard["idle"].backend == "CPU"
    assert by_shard["holding"].devices[0].used_bytes == 30000 << 20
    assert by_shard["holding"].placed_gpus == [0] and by_shard["holding"].pid == holding
    assert by_shard["stray"].reason.startswith("placed on GPU 1 but holds 7.8 GiB on GPU 0")

    # Memory appears on GPU 1 for the idle shard: gpu, and the event resolves.
    fake_gpu.write(
        "nvidia-smi",
        "query-compute-apps.csv",
        apps(
            {holding: (GPU0, 30000), stray: (GPU0, 8000), child: (GPU1, 12000), idle: (GPU1, 9000)}
        ),
    )
    after = wait_for_events(nats_server.url, lambda s: len(s) >= 8, timeout=5)
    assert after[6:] == [("fallback", "idle", "resolved"), ("compute", "idle", "gpu")]
    code, _, _, err = worker.stop()
    assert code == 0, err

    # A restarted worker (a new session) reports each shard once again. The stray
    # shard's fallback, still firing from the first session, is not fired twice; and
    # the idle one, back on the CPU while no worker ran, fires and resolves as it should.
    fake_gpu.write(
        "nvidia-smi",
        "query-compute-apps.csv",
        apps({holding: (GPU0, 30000), stray: (GPU0, 8000), child: (GPU1, 12000)}),
    )
    worker = Worker(*args, env=fake_gpu.env())
    workers.append(worker)
    again = wait_for_events(nats_server.url, lambda s: len(s) >= 8 + 5)
    assert sorted(again[8:]) == sorted(
        [
            ("compute", "holding", "gpu"),
            ("compute", "idle", "cpu_fallback"),
            ("fallback", "idle", "firing"),
            ("compute", "stray", "misplaced"),
            ("compute", "parent", "gpu"),
        ]
    )
    code, _, _, err = worker.stop()
    assert code == 0, err

    # A third session finds the stray shard placed right: its old fallback resolves.
    shards.write_text(
        shards.read_text().replace(f"pid = {stray}\ngpus = [1]", f"pid = {stray}\ngpus = [0]")
    )
    worker = Worker(*args, env=fake_gpu.env())
    workers.append(worker)
    third = wait_for_events(nats_server.url, lambda s: ("fallback", "stray", "resolved") in s[13:])
    assert ("compute", "stray", "gpu") in third[13:]
    assert ("fallback", "idle", "firing") not in third[13:]  # still firing, not again
    worker.stop()


def test_placements_bucket_is_watched_live(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
) -> None:
    pid = start(shard_procs, "kv")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU1, 4000)}))
    wait_older_than([pid], 1.2)
    worker = Worker(
        "--nats",
        nats_server.url,
        "--node",
        "n2",
        "--grace",
        "1",
        "--interval",
        "1",
        "--no-discover",
        env=fake_gpu.env(),
    )
    workers.append(worker)

    anyio.run(
        put,
        nats_server.url,
        "n2.kv-shard",
        json.dumps({"id": "kv-shard", "pid": pid, "gpus": [1]}).encode(),
        backend="asyncio",
    )
    seen = wait_for_events(nats_server.url, lambda s: ("compute", "kv-shard", "gpu") in s)
    assert seen == [("compute", "kv-shard", "gpu")]
    anyio.run(
        put,
        nats_server.url,
        "n2.kv-shard",
        json.dumps({"id": "kv-shard", "pid": pid, "gpus": [0]}).encode(),
        backend="asyncio",
    )
    wait_for_events(nats_server.url, lambda s: ("compute", "kv-shard", "misplaced") in s, timeout=5)
    anyio.run(put, nats_server.url, "n2.broken", b"{not json", backend="asyncio")
    anyio.run(put, nats_server.url, "n2.kv-shard", None, backend="asyncio")
    final = wait_for_events(
        nats_server.url, lambda s: ("compute", "kv-shard", "gone") in s, timeout=5
    )
    ours = [e for e in final if e[1] == "kv-shard"]
    assert ours[-2:] == [("fallback", "kv-shard", "resolved"), ("compute", "kv-shard", "gone")]
    assert ("compute", "broken", "unknown") in final  # the refused key is answered too
    code, _, _, err = worker.stop()
    assert code == 0
    assert "KV placewatch_placements key n2.broken: not JSON" in err


def test_a_bucket_placement_of_a_process_the_shards_file_places_is_refused(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    pid = start(shard_procs, "held")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU1, 4000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "file-shard"\npid = {pid}\ngpus = [1]\n')
    wait_older_than([pid], 1.2)
    worker = Worker(
        "--nats", nats_server.url, "--node", "n3", "--shards", str(shards), "--grace", "1",
        "--interval", "1", "--no-discover", env=fake_gpu.env(),
    )  # fmt: skip
    workers.append(worker)
    wait_for_events(nats_server.url, lambda s: ("compute", "file-shard", "gpu") in s)
    placement = {"id": "kv-shard", "pid": pid, "gpus": [0]}
    anyio.run(
        put, nats_server.url, "n3.kv-shard", json.dumps(placement).encode(), backend="asyncio"
    )
    said = (
        f"placement 'kv-shard' of the placements bucket names process {pid}, which shards-file "
        "entry 'file-shard' holds"
    )
    with RawSubscriber(nats_server.url, "placewatch.telemetry.n3") as sub:
        for _ in range(20):
            telemetry = sub.next(timeout=5).json()
            assert isinstance(telemetry, dict)
            errors = [s.get("error") or "" for s in telemetry["sources"]]
            if any(e.startswith(said) for e in errors):
                break
        else:
            raise AssertionError(f"no source says the placement is refused: {errors}")
    assert {s: r["verdict"] for s, r in telemetry["shards"].items()} == {
        "file-shard": "gpu",
        "kv-shard": "unknown",  # refused, and said so on its own key
    }
    # Nothing fired: the shard that holds the process keeps it and its verdict.
    assert events_now(nats_server.url) == [
        ("compute", "file-shard", "gpu"),
        ("compute", "kv-shard", "unknown"),
    ]
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert err.count(f"WARNING {said}") == 1  # logged once; its status says it once too


def test_sample_json_lists_shards_and_verdicts_without_a_bus(
    fake_gpu: FakeGpuTools, shard_procs: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = start(shard_procs, "one")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU0, 2048)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "one"\npid = {pid}\ngpus = [0]\n\n[[shard]]\nid = "broken"\ngpus = [0]\n'
    )
    wait_older_than([pid], 1.2)
    done = run_placewatch(
        "sample",
        "--json",
        "--shards",
        str(shards),
        "--grace",
        "1",
        "--no-discover",
        env=fake_gpu.env(),
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    broken, brief = doc["shards"]
    assert (brief["shard"], brief["verdict"], brief["pid"]) == ("one", "gpu", pid)
    assert (broken["shard"], broken["verdict"]) == ("broken", "unknown")  # refused, said so
    (process,) = [p for p in doc["gpus"][0]["processes"] if p["pid"] == pid]
    assert process["shard"] == "one"
    assert doc["gpus"][0]["foreign_bytes"] == (40960 - 2048) << 20
    problems = [s for s in doc["sources"] if s["name"] == "shards-file"]
    assert len(problems) == 1 and "give `pid` or `match`" in problems[0]["error"]


def test_a_just_started_shard_is_starting_then_judged(
    fake_gpu: FakeGpuTools, shard_procs: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pid = start(shard_procs, "young")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "young"\npid = {pid}\ngpus = [1]\n')
    env = fake_gpu.env()
    done = run_placewatch(
        "sample", "--json", "--shards", str(shards), "--grace", "30", "--no-discover", env=env
    )
    assert json.loads(done.stdout)["shards"][0]["verdict"] == "starting"
    done = run_placewatch(
        "sample", "--json", "--shards", str(shards), "--grace", "0", "--no-discover", env=env
    )
    assert json.loads(done.stdout)["shards"][0]["verdict"] == "cpu_fallback"


def test_engine_log_evidence_outranks_the_memory_it_holds(
    fake_gpu: FakeGpuTools, shard_procs: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # llama.cpp at 0 of 29 layers still holds a CUDA compute buffer on its GPU.
    pid = start(shard_procs, "zero")
    log = tmp_path / "zero.log"
    log.write_text("")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU0, 1200)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "zero"\npid = {pid}\ngpus = [0]\nlog_path = "{log}"\n')
    wait_older_than([pid], 1.2)
    env = fake_gpu.env()
    argv = ("sample", "--json", "--shards", str(shards), "--grace", "1", "--no-discover")
    (brief,) = json.loads(run_placewatch(*argv, env=env).stdout)["shards"]
    assert brief["verdict"] == "gpu"  # the log says nothing yet: memory decides
    log.write_text(
        (FIXTURES / "engine-logs" / "llamacpp-zero-offload-cuda-compute-buffer.log").read_text()
    )
    (brief,) = json.loads(run_placewatch(*argv, env=env).stdout)["shards"]
    assert brief["verdict"] == "cpu_fallback"
    assert "offloaded 0 of 29 layers" in brief["reason"]


def test_a_llama_server_nothing_places_is_discovered(
    fake_gpu: FakeGpuTools, shard_procs: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    link = tmp_path / "llama-server"
    link.symlink_to(sys.executable)
    proc = subprocess.Popen(
        [str(link), "-c", SLEEP, "-m", "m.gguf", "--port", "18080", "-ngl", "99"],
        env={**fake_gpu.env(), "CUDA_VISIBLE_DEVICES": "1"},
        start_new_session=True,
    )
    shard_procs["llama"] = proc
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({proc.pid: (GPU1, 6000)})
    )
    wait_older_than([proc.pid], 1.2)
    done = run_placewatch("sample", "--json", "--grace", "1", env=fake_gpu.env())
    assert done.returncode == 0, done.stderr
    shards = {b["shard"]: b for b in json.loads(done.stdout)["shards"]}
    assert shards["llama-server-18080"]["verdict"] == "gpu"
    assert shards["llama-server-18080"]["pid"] == proc.pid


def test_health_url_decides_readiness(
    fake_gpu: FakeGpuTools, shard_procs: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    status = {"code": 503}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status["code"])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        pid = start(shard_procs, "web")
        fake_gpu.nvidia_smi(
            FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU0, 5000)})
        )
        url = f"http://127.0.0.1:{server.server_address[1]}/health"
        shards = tmp_path / "shards.toml"
        shards.write_text(f'[[shard]]\nid = "web"\npid = {pid}\ngpus = [0]\nhealth_url = "{url}"\n')
        argv = ("sample", "--json", "--shards", str(shards), "--grace", "0", "--no-discover")
        (brief,) = json.loads(run_placewatch(*argv, env=fake_gpu.env()).stdout)["shards"]
        assert brief["verdict"] == "starting"  # 503 while the model loads, grace or not
        status["code"] = 200
        (brief,) = json.loads(run_placewatch(*argv, env=fake_gpu.env()).stdout)["shards"]
        assert brief["verdict"] == "gpu"
    finally:
        server.shutdown()
        server.server_close()


def test_a_new_log_line_is_judged_without_waiting_for_the_next_interval(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    pid = start(shard_procs, "logged")
    log = tmp_path / "engine.log"
    log.write_text("")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU0, 1200)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "logged"\npid = {pid}\ngpus = [0]\nlog_path = "{log}"\n')
    wait_older_than([pid], 1.2)
    # An interval of a minute: only the log follower can bring the change in time.
    workers.append(
        Worker("--nats", nats_server.url, "--node", "n1", "--shards", str(shards), "--grace", "1",
               "--interval", "60", "--no-discover", env=fake_gpu.env())
    )  # fmt: skip
    wait_for_events(nats_server.url, lambda s: s == [("compute", "logged", "gpu")])
    with log.open("a") as f:
        f.write("load_tensors: offloaded 0/29 layers to GPU\n")
    seen = wait_for_events(nats_server.url, lambda s: len(s) >= 3, timeout=15)
    assert seen[1:] == [("fallback", "logged", "firing"), ("compute", "logged", "cpu_fallback")]
