"""A local user (`nobody`) against a real `placewatch run` through engine logs, with a real
nats-server and fake GPU tools: the node keeps publishing every interval and stops on
SIGTERM, and no byte of a file its engine could not have written is published or logged.
(tests/integration/engines/test_log_attacks.py tries the same against the reader itself.)"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import psutil
import pytest

from placewatch.schemas import ComputeStatus, decode_any

from tests.conftest import (
    FIXTURES,
    GPU0,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    run_placewatch,
    wait_older_than,
)
from tests.support.eventually import eventually
from tests.support.hostile import (
    NOBODY_UID,
    ON_GPU,
    Recorder,
    as_nobody,
    needs_root,
    nobody_engine,
    nobody_folder,
    nobody_runs,
    root_secret,
    stop,
)

pytestmark = needs_root

SECRET = "ggml_cuda_init: failed to initialize CUDA: ROOTONLY-SECRET-9d2e"
QUERY_GPU = FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv"
SWAPPER = """
import os, sys
path = sys.argv[1]
n = 0
while True:
    n += 1
    os.mkfifo(f"{path}.{n}")
    os.replace(f"{path}.{n}", path)
    with open(f"{path}.{n}f", "w") as f:
        f.write("load_tensors: offloaded 0/33 layers to GPU\\n" * (n % 50))
    os.replace(f"{path}.{n}f", path)
"""
"""Swaps its log path between a named pipe and a growing file, for as long as it runs."""


@pytest.fixture
def folder() -> Iterator[Path]:
    with nobody_folder() as made:
        yield made


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    stop(started)


def statuses(recorder: Recorder, shard: str) -> list[ComputeStatus]:
    found = []
    for _, m in list(recorder.messages):
        if m.subject == f"placewatch.compute.n1.{shard}":
            status = decode_any(m.payload, m.headers)
            assert isinstance(status, ComputeStatus)
            found.append(status)
    return found


def reasons_now(url: str) -> dict[str, str]:
    """Each shard's reason, as the worker's service answers it now."""

    async def ask() -> dict[str, str]:
        nc = await nats.connect(url)
        try:
            reply = await nc.request("placewatch.service.n1.shards", b"", timeout=3)
        finally:
            await nc.close()
        return {s["shard"]: s["reason"] for s in json.loads(reply.data)}

    return anyio.run(ask, backend="asyncio")


def test_a_log_swapped_between_a_file_and_a_named_pipe_leaves_the_node_publishing(  # noqa: PLR0917
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    workers: list[Worker],
    folder: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    log, placed_log = folder / "engine.log", folder / "placed.log"
    env = fake_gpu.env()
    procs.append(nobody_engine(folder, log, 18191, env))  # discovered: its stderr is held
    placed = as_nobody(["sleep", "120"])
    procs.append(placed)
    fake_gpu.nvidia_smi(QUERY_GPU, apps({procs[0].pid: (GPU0, 5000), placed.pid: (GPU0, 5000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "placed"\npid = {placed.pid}\ngpus = [0]\n'
                      f'log_path = "{placed_log}"\n')  # fmt: skip
    with Recorder(nats_server.url, "placewatch.>") as recorder:
        worker = Worker("--nats", nats_server.url, "--node", "n1", "--shards", str(shards),
                        "--grace", "1", "--interval", "1", env=env)  # fmt: skip
        workers.append(worker)
        eventually(lambda: statuses(recorder, "llama-server-18191"), what="the engine judged")
        for swapped in (log, placed_log):
            procs.append(as_nobody([sys.executable, "-c", SWAPPER, str(swapped)]))
        swapping = time.monotonic()
        eventually(lambda: len(recorder.arrivals("placewatch.telemetry.n1")) and
                   recorder.arrivals("placewatch.telemetry.n1")[-1] > swapping + 8,
                   timeout=20, what="eight seconds of telemetry under the attack")  # fmt: skip
        code, took, _, err = worker.stop()
    assert code == 0 and took < 5, err
    during = [at for at in recorder.arrivals("placewatch.telemetry.n1") if at > swapping]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert len(during) >= 8 and max(gaps) < 1.5, gaps
    said = {s.reason for s in statuses(recorder, "placed")}
    assert all(str(placed_log) in r for r in said if "its log is not read" in r), said


def test_a_log_replaced_by_a_link_to_a_root_only_file_publishes_none_of_it(  # noqa: PLR0917
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    workers: list[Worker],
    folder: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    secret = root_secret(tmp_path, (SECRET + "\n") * 3)
    log, placed_log = folder / "engine.log", folder / "placed.log"
    env = fake_gpu.env()
    procs.append(nobody_engine(folder, log, 18192, {**env, "CUDA_VISIBLE_DEVICES": "0"}))
    placed = as_nobody(["sleep", "120"])
    procs.append(placed)
    fake_gpu.nvidia_smi(QUERY_GPU, apps({procs[0].pid: (GPU0, 5000), placed.pid: (GPU0, 5000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "placed"\npid = {placed.pid}\ngpus = [0]\n'
                      f'log_path = "{placed_log}"\n')  # fmt: skip
    with Recorder(nats_server.url, ">") as recorder:
        worker = Worker("--nats", nats_server.url, "--node", "n1", "--shards", str(shards),
                        "--grace", "1", "--interval", "1", env=env)  # fmt: skip
        workers.append(worker)
        engine = "llama-server-18192"
        eventually(lambda: any(s.evidence == [ON_GPU] for s in statuses(recorder, engine)),
                   what="the engine's own word published")  # fmt: skip
        for path in (str(log), str(placed_log)):
            nobody_runs(f"import os, contextlib\nwith contextlib.suppress(OSError): os.unlink({path!r})\n"
                        f"os.symlink({str(secret)!r}, {path!r})")  # fmt: skip
        linked = f"{placed_log} is a symbolic link"
        eventually(lambda: linked in reasons_now(nats_server.url).get("placed", ""),
                   what="the placed shard's log refused")  # fmt: skip
        refused = reasons_now(nats_server.url)["placed"]
        seen = len(statuses(recorder, engine))
        eventually(lambda: len(statuses(recorder, engine)) > seen + 2 or
                   len(recorder.arrivals("placewatch.telemetry.n1")) > 6, timeout=20)  # fmt: skip
        code, _, _, err = worker.stop()
    assert code == 0, err
    assert b"ROOTONLY" not in recorder.everything()
    assert "ROOTONLY" not in err
    assert {s.verdict for s in statuses(recorder, engine)} == {"gpu"}
    assert refused.endswith(
        f"; its log is not read: {placed_log} is a symbolic link: a log is read where it is, "
        "never where a link points"
    )


FLOOD = """
import sys, time
lines = b"load_tensors: offloaded 1/33 layers to GPU; CUDA0 model buffer size = 1 MiB\\n" * 10000
with open(sys.argv[1], "ab", buffering=0) as out:
    while True:
        started = time.monotonic()
        out.write(lines)
        time.sleep(max(0.0, 0.01 - (time.monotonic() - started)))
"""
"""A log of keyword lines growing at up to 80 MB/s."""


def test_a_chatty_log_leaves_every_tick_on_time_and_says_it_is_behind(  # noqa: PLR0917
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    workers: list[Worker],
    folder: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    log = folder / "chatty.log"
    engine = as_nobody(["sleep", "120"])
    procs.append(engine)
    fake_gpu.nvidia_smi(QUERY_GPU, apps({engine.pid: (GPU0, 5000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "chatty"\npid = {engine.pid}\ngpus = [0]\n'
                      f'log_path = "{log}"\n')  # fmt: skip
    log.touch()
    os.chown(log, NOBODY_UID, NOBODY_UID)
    procs.append(as_nobody([sys.executable, "-c", FLOOD, str(log)]))
    flooding = time.monotonic()
    with Recorder(nats_server.url, "placewatch.telemetry.n1") as recorder:
        worker = Worker("--nats", nats_server.url, "--node", "n1", "--shards", str(shards),
                        "--grace", "1", "--interval", "1", "--no-discover", env=fake_gpu.env())  # fmt: skip
        workers.append(worker)
        eventually(lambda: len(recorder.arrivals("placewatch.telemetry.n1")) >= 9,
                   timeout=30, what="nine ticks under the flood")  # fmt: skip
        reason = reasons_now(nats_server.url)["chatty"]
        code, took, _, err = worker.stop()
    stop(procs[1:])  # the writer, before its log is measured
    assert code == 0 and took < 5, err
    ticks = recorder.arrivals("placewatch.telemetry.n1")
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.5, gaps
    rate = log.stat().st_size / (time.monotonic() - flooding)
    assert rate > 20e6, f"the flood wrote {rate / 1e6:.0f} MB/s"  # the load was offered
    assert "its evidence is behind: its log holds" in reason, reason


SLOTS = """
import sys
with open(sys.argv[1], "a", buffering=1 << 20) as out:
    for n in range(200_000):
        out.write(f"0.03.049.435 I slot launch_slot_: id {n} | task {n} | processing task\\n")
"""
"""Starts 200,000 requests, each on a new slot id, and ends none."""


def test_a_flood_of_new_slot_ids_leaves_the_worker_s_memory_bounded(  # noqa: PLR0917
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    workers: list[Worker],
    folder: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    log = folder / "slots.log"
    engine = as_nobody(["sleep", "120"])
    procs.append(engine)
    fake_gpu.nvidia_smi(QUERY_GPU, apps({engine.pid: (GPU0, 5000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "slots"\npid = {engine.pid}\ngpus = [0]\n'
                      f'log_path = "{log}"\n')  # fmt: skip
    log.touch()
    os.chown(log, NOBODY_UID, NOBODY_UID)
    with Recorder(nats_server.url, "placewatch.telemetry.n1") as recorder:
        worker = Worker("--nats", nats_server.url, "--node", "n1", "--shards", str(shards),
                        "--grace", "1", "--interval", "1", "--no-discover", env=fake_gpu.env())  # fmt: skip
        workers.append(worker)
        eventually(lambda: len(recorder.arrivals("placewatch.telemetry.n1")) >= 2)
        process = psutil.Process(worker.proc.pid)
        before = process.memory_info().rss
        writer = as_nobody([sys.executable, "-c", SLOTS, str(log)])
        procs.append(writer)
        assert writer.wait(60) == 0
        ticks = len(recorder.arrivals("placewatch.telemetry.n1"))
        eventually(lambda: len(recorder.arrivals("placewatch.telemetry.n1")) > ticks + 1)
        eventually(lambda: "behind" not in reasons_now(nats_server.url)["slots"], timeout=60,
                   what="every slot line read")  # fmt: skip
        after = process.memory_info().rss
        code, _, _, err = worker.stop()
    assert code == 0, err
    assert after - before < 20 << 20, f"{(after - before) / 2**20:.0f} MiB more"


def test_names_reasons_and_evidence_are_published_without_control_characters(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    workers: list[Worker],
    folder: Path,
    tmp_path: Path,
) -> None:
    engine = as_nobody(["sleep", "120"])
    log = folder / "bidi.log"
    log.write_text("ggml_cuda_init: failed to initialize CUDA: \u202eUDC\x1b[2J\n")
    os.chown(log, NOBODY_UID, NOBODY_UID)
    fake_gpu.nvidia_smi(QUERY_GPU, apps({engine.pid: (GPU0, 5000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a\\u001b]0;x\\u0007b"\npid = {engine.pid}\n'
                      f'gpus = [0]\nlog_path = "{log}"\n')  # fmt: skip
    try:
        with Recorder(nats_server.url, ">") as recorder:
            worker = Worker("--nats", nats_server.url, "--node", "n1", "--shards", str(shards),
                            "--grace", "1", "--interval", "1", "--no-discover", env=fake_gpu.env())  # fmt: skip
            workers.append(worker)
            shard = "a\\x1b]0;x\\x07b"
            eventually(lambda: statuses(recorder, shard.replace("\\", "=5C").replace("]", "=5D")
                                        .replace(";", "=3B")), what="the status")  # fmt: skip
            code, _, _, err = worker.stop()
    finally:
        stop([engine])
    assert code == 0, err
    carried = recorder.everything()
    assert b"\x1b" not in carried and "\u202e".encode() not in carried
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err
    (status, *_) = [
        decode_any(m.payload, m.headers)
        for _, m in recorder.messages
        if m.subject.startswith("placewatch.compute.n1.")
    ]
    assert isinstance(status, ComputeStatus)
    assert (status.shard, status.verdict) == (shard, "cpu_fallback")
    assert "failed to initialize CUDA: \\u202eUDC" in status.reason
    assert status.evidence == ["ggml_cuda_init: failed to initialize CUDA: \\u202eUDC"]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "device", "root-only"])
def test_a_placed_log_path_that_is_not_the_engine_s_is_refused_by_the_worker_and_doctor(
    kind: str,
    fake_gpu: FakeGpuTools,
    folder: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    engine = as_nobody(["sleep", "120"])
    procs.append(engine)
    fake_gpu.nvidia_smi(QUERY_GPU, apps({engine.pid: (GPU0, 5000)}))
    log = folder / "engine.log"
    if kind == "fifo":
        os.mkfifo(log)
        why = f"{log} is a named pipe, not a file, so it is not read"
    elif kind == "symlink":
        log.symlink_to(root_secret(tmp_path, SECRET + "\n"))
        why = f"{log} is a symbolic link: a log is read where it is, never where a link points"
    elif kind == "device":
        log = Path("/dev/zero")
        why = "/dev/zero is a character device, not a file, so it is not read"
    else:
        log.write_text(SECRET + "\n")
        log.chmod(0o600)
        why = (
            f"{log} may not be read by the engine's user (uid {NOBODY_UID}): it is mode 0600, "
            "owned by uid 0 and gid 0, so it is not read"
        )
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "a"\npid = {engine.pid}\ngpus = [0]\nlog_path = "{log}"\n')
    wait_older_than([engine.pid], 0.2)
    argv = ("sample", "--json", "--shards", str(shards), "--grace", "0", "--no-discover")
    done = run_placewatch(*argv, env=fake_gpu.env(), timeout=20)
    assert done.returncode == 0, done.stderr
    (brief,) = json.loads(done.stdout)["shards"]
    assert brief["verdict"] == "gpu"
    assert brief["reason"].endswith(f"; its log is not read: {why}")
    assert "ROOTONLY" not in done.stdout + done.stderr
    asks = ("doctor", "--shards", str(shards), "--no-discover", "--nats", "nats://127.0.0.1:1")
    doctor = run_placewatch(*asks, env=fake_gpu.env(), timeout=30)
    said = [x for x in doctor.stdout.splitlines() if x.startswith("fail  engine logs:")]
    assert said == [
        f"fail  engine logs: a: its log is not read: {why}; next: name the file the engine "
        "itself writes, as its own user may read it (docs/shards.md); or leave log_path out"
    ], doctor.stdout
    assert "ROOTONLY" not in doctor.stdout + doctor.stderr
