"""Ollama as it runs today, under a stand-in of its server written from its sources
(tests/support/ollama_serve.py): the model's llama-server, a child of `ollama serve`, is found
as an Ollama shard named by its model, its lines read from the server's log, and judged
against what the server's /api/ps says of it. The GPU is a stand-in reading (no GPU here)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import anyio
import psutil
import pytest

from placewatch.schemas import ComputeStatus, GpuProcess, GpuSample
from placewatch.worker.engines.evidence.follow import EngineLogs
from placewatch.worker.shards.discover import Discovered, discover
from placewatch.worker.shards.shard_pass import ShardPass

from tests.conftest import FIXTURES, free_port
from tests.support import ollama_serve
from tests.support.eventually import eventually
from tests.support.llama_server import healthy
from tests.support.ollama_serve import OllamaServe, ollama_args

HERE = FIXTURES / "ollama"
UUID = "GPU-6f1c2b9e-2a4d-6b37-91e0-3c5d7a8e4f12"
MODEL = "llama3.2:3b"
BLOB = "/usr/share/ollama/.ollama/models/blobs/sha256-" + (
    "dde5aa3fc5ffc17176b5e8bdc82f587b24b2678c6c66101bf7da77af9f7ccdff"
)
GiB = 1 << 30


def gpu(*holders: int) -> list[GpuSample]:
    """The RTX 4090 of the fixtures, its memory held by `holders` (4 GiB each)."""
    return [
        GpuSample(
            index=0,
            uuid=UUID,
            vendor="nvidia",
            memory_used_bytes=4 * GiB * len(holders),
            processes=[GpuProcess(pid=p, used_bytes=4 * GiB) for p in holders],
        )
    ]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[OllamaServe]:
    """The stand-in with llama3.2:3b loaded as the fixtures show it: its child prints the
    child's lines of 0.33-cuda-full.stderr.log, its /api/ps says 100% GPU."""
    text = (HERE / "0.33-cuda-full.stderr.log").read_text()
    lines = tmp_path / "child.txt"
    lines.write_text("".join(x for x in text.splitlines(True) if not x.startswith("time=")))
    started = ollama_serve.start(
        tmp_path / "ollama",
        ps=json.loads((HERE / "api-ps-gpu.json").read_text()),
        models={MODEL: BLOB},
        args=ollama_args(BLOB, free_port()),
        lines=lines,
        env={"CUDA_VISIBLE_DEVICES": UUID},
    )
    try:
        started.said("sched_reserve: graph: nodes")
        yield started
    finally:
        started.stop()


def mine(serve: OllamaServe) -> list[Discovered]:
    ours = {serve.proc.pid, serve.child, serve.probe}
    return [d for d in discover(gpu(), processes=psutil.process_iter()) if d.spec.pid in ours]


def test_its_model_s_process_is_a_shard_named_by_the_model_under_its_server(
    serve: OllamaServe,
) -> None:
    (d,) = mine(serve)  # the server and its discovery probe are none
    assert (d.spec.id, d.engine, d.spec.pid, d.spec.gpus) == (
        f"ollama-{serve.port}/{MODEL}", "ollama", serve.child, [0],
    )  # fmt: skip
    assert d.spec.log_path == str(serve.log)  # the server's stderr, where its lines go
    assert d.server is not None and (d.server.pid, d.server.port) == (serve.proc.pid, serve.port)
    assert d.model == MODEL


def judge(shards: ShardPass, gpus: list[GpuSample]) -> dict[str, ComputeStatus]:
    async def once() -> dict[str, ComputeStatus]:
        async with anyio.create_task_group() as tg:
            assert shards.logs is not None
            await tg.start(shards.logs.run)
            view = await shards.judge(gpus, gpus_known=True)
            tg.cancel_scope.cancel()
        return {s.shard: s for s in view.statuses}

    return anyio.run(once, backend="asyncio")


def test_all_on_the_gpu_by_its_word_but_holding_no_gpu_memory_is_a_fallback(
    serve: OllamaServe,
) -> None:
    shards = ShardPass("n", "s", grace_s=0, logs=EngineLogs())
    status = judge(shards, gpu())[f"ollama-{serve.port}/{MODEL}"]
    assert (status.verdict, status.engine, status.pid) == ("cpu_fallback", "ollama", serve.child)
    assert status.reason.startswith(
        "placed on GPU 0 but computing on the CPU: Ollama's /api/ps says 100% GPU (5.6 GiB of "
        "5.6 GiB in GPU memory), yet its processes hold no memory the GPU tools list there"
    )
    assert "load_tensors: offloaded 29/29 layers to GPU" in status.evidence  # its own lines
    assert (status.layers_offloaded, status.layers_total) == (29, 29)
    held = judge(shards, gpu(serve.child))[f"ollama-{serve.port}/{MODEL}"]
    assert (held.verdict, held.backend) == ("gpu", "CUDA")


def test_the_real_llama_server_launched_as_ollama_does_is_named_by_its_model_and_read(
    llama_server_binary: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """The real-engine lane's llama-server b11434, started by the stand-in exactly as
    llm/llama_server.go starts Ollama's (its path `lib/ollama/llama-server`, its arguments,
    its output piped into the server's stderr), on a model file named as Ollama names blobs."""
    blob = tmp_path / "models" / "blobs" / f"sha256-{sha256(tiny_model.read_bytes()).hexdigest()}"
    blob.parent.mkdir(parents=True)
    shutil.copyfile(tiny_model, blob)
    size = blob.stat().st_size
    loaded = {"name": "tiny:latest", "model": "tiny:latest", "size": size, "size_vram": 0}
    port = free_port()
    serve = ollama_serve.start(
        tmp_path / "ollama",
        ps={"models": [loaded]},
        models={"tiny:latest": str(blob)},
        args=ollama_args(str(blob), port),
        binary=llama_server_binary,
        env={"CUDA_VISIBLE_DEVICES": UUID},
        probe=False,
    )
    try:
        eventually(lambda: healthy(port), 60, what="the real llama-server's /health")
        shards = ShardPass("n", "s", grace_s=0, logs=EngineLogs())
        status = judge(shards, gpu())[f"ollama-{serve.port}/tiny:latest"]
    finally:
        serve.stop()
    assert (status.engine, status.pid, status.verdict) == ("ollama", serve.child, "cpu_fallback")
    said = "\n".join(status.evidence)
    assert "- CPU" in said or "CPU_Mapped model buffer size" in said  # its own lines, read
