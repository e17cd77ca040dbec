"""One process as a placement: its engine, its id, its health URL and its start time."""

from __future__ import annotations

import pytest

from placewatch.worker.shards.discover import classify

from tests.support.discovery import A100X4, MODEL, OLLAMA_BLOB, SERVER, found


@pytest.mark.parametrize(
    ("cmdline", "engine", "shard", "health_url"),
    [
        (
            [SERVER, "-m", MODEL, "--port", "8081", "-ngl", "99"],
            "llama.cpp",
            "llama-server-8081",
            "http://127.0.0.1:8081/health",
        ),
        ([SERVER, "-m", MODEL], "llama.cpp", "llama-server-8080", "http://127.0.0.1:8080/health"),
        (
            [r"C:\llama\llama-server.exe", "-m", MODEL, "--port=9000"],
            "llama.cpp",
            "llama-server-9000",
            "http://127.0.0.1:9000/health",
        ),
        (["llama-cli", "-m", MODEL, "-p", "hello"], "llama.cpp", "llama-cli-4242", None),
        (
            ["python3", "-m", "llama_cpp.server", "--model", MODEL, "--n_gpu_layers", "-1"],
            "llama.cpp",
            "llama-cpp-python-8000",
            None,
        ),
        (
            ["/usr/local/bin/ollama", "runner", "--model", OLLAMA_BLOB, "--port", "43210"],
            "ollama",
            "ollama-runner-43210",
            None,
        ),
        (
            [
                "/usr/bin/ollama",
                "runner",
                "--ollama-engine",
                "--model",
                OLLAMA_BLOB,
                "--port",
                "35117",
            ],
            "ollama",
            "ollama-runner-35117",
            None,
        ),
        (
            [
                "/tmp/ollama3208993108/runners/cuda_v12/ollama_llama_server",
                "--model",
                OLLAMA_BLOB,
                "--ctx-size",
                "8192",
                "--batch-size",
                "512",
                "--n-gpu-layers",
                "33",
                "--threads",
                "8",
                "--parallel",
                "4",
                "--port",
                "38451",
            ],
            "ollama",
            "ollama-runner-38451",
            None,
        ),
        (
            ["ollama_llama_server", "runner", "--model", OLLAMA_BLOB, "--port", "40001"],
            "ollama",
            "ollama-runner-40001",
            None,
        ),
        (
            ["/venv/bin/python3", "/venv/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
            "vllm",
            "vllm-8000",
            "http://127.0.0.1:8000/health",
        ),
        (
            ["vllm", "serve", "Qwen/Qwen2.5-7B", "--port", "8100", "--host", "0.0.0.0"],
            "vllm",
            "vllm-8100",
            "http://127.0.0.1:8100/health",
        ),
        (
            [
                "python3",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m",
                "--port",
                "8200",
            ],
            "vllm",
            "vllm-8200",
            "http://127.0.0.1:8200/health",
        ),
        (
            [
                "/usr/bin/python3.12",
                "-u",
                "-X",
                "faulthandler",
                "-m",
                "vllm.entrypoints.cli.main",
                "serve",
                "m",
            ],
            "vllm",
            "vllm-8000",
            "http://127.0.0.1:8000/health",
        ),
        (
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.run_batch",
                "-i",
                "in.jsonl",
                "-o",
                "out.jsonl",
            ],
            "vllm",
            "vllm-run-batch-4242",
            None,
        ),
    ],
)
def test_each_engine_is_recognised_with_its_id_and_health_url(
    cmdline: list[str], engine: str, shard: str, health_url: str | None
) -> None:
    d = found(cmdline)
    assert (d.engine, d.spec.engine, d.spec.id, d.spec.pid, d.spec.health_url) == (
        engine,
        engine,
        shard,
        4242,
        health_url,
    )


def test_classify_passes_the_start_time_through() -> None:
    d = classify([SERVER, "-m", MODEL], {}, 4242, A100X4, create_time=1700000000.25)
    assert d is not None and d.create_time == 1700000000.25
