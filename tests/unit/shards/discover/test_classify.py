"""Discovering engine processes that nothing placed, and the GPUs each meant to use."""

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

from placewatch.schemas import GpuSample
from placewatch.shards.discover import Discovered, classify, discover

A100 = "NVIDIA A100-SXM4-80GB"
NODE = [
    GpuSample(index=i, uuid=f"GPU-{i}{i}aa0000-0000-0000-0000-00000000000{i}", name=A100)
    for i in range(4)
]
MIXED = [
    GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA GeForce RTX 4090"),
    GpuSample(index=1, uuid="GPU-bbbb", name="NVIDIA RTX A4000"),
]
AMD = [
    GpuSample(index=i, uuid=f"0x{i}f00d", vendor="amd", name="AMD Instinct MI300X")
    for i in range(4)
]
BOTH = [
    GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA L4"),
    GpuSample(index=1, uuid="GPU-bbbb", name="NVIDIA L4"),
    GpuSample(index=2, uuid="0x2f00d", vendor="amd", name="AMD Radeon RX 7900 XTX"),
]

SERVER = "/opt/llama.cpp/build/bin/llama-server"
MODEL = "/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
OLLAMA_BLOB = "/usr/share/ollama/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f220ff6e"


def found(
    cmdline: list[str], env: dict[str, str] | None = None, gpus: list[GpuSample] = NODE
) -> Discovered:
    d = classify(cmdline, {} if env is None else env, 4242, gpus)
    assert d is not None, cmdline
    return d


# --- which processes are engines ---------------------------------------------------------


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


@pytest.mark.parametrize(
    "cmdline",
    [
        ["/usr/local/bin/ollama", "serve"],
        ["ollama", "run", "llama3.1"],
        ["ollama", "runner", "--ollama-engine", "--port", "41234"],  # 0.12's GPU discovery probe
        ["python", "app.py"],
        ["python3", "-c", "import vllm"],
        ["python3", "-m", "http.server", "8080"],
        ["grep", "--color=auto", "llama-server"],
        ["vim", "/opt/llama.cpp/build/bin/llama-server"],
        ["bash", "-c", "llama-server -m model.gguf --port 8080"],
        ["tail", "-f", "/var/log/llama-server.log"],
        ["vllm", "chat", "--url", "http://localhost:8000/v1"],
        ["python3", "/home/me/vllm_notes.py", "serve"],
        ["llama-server-wrapper.sh"],
        [],
    ],
)
def test_processes_that_are_not_engines_are_not_shards(cmdline: list[str]) -> None:
    assert classify(cmdline, {}, 4242, NODE) is None


@pytest.mark.parametrize(
    ("cmdline", "env", "shard", "health_url"),
    [
        (
            [SERVER, "-m", MODEL],
            {"LLAMA_ARG_PORT": "9090"},
            "llama-server-9090",
            "http://127.0.0.1:9090/health",
        ),
        (
            [SERVER, "--port", "9191"],
            {"LLAMA_ARG_PORT": "9090"},
            "llama-server-9191",
            "http://127.0.0.1:9191/health",
        ),
        ([SERVER, "--host", "10.0.0.5"], {}, "llama-server-8080", "http://10.0.0.5:8080/health"),
        (
            [SERVER, "--host", "::1", "--port", "8082"],
            {},
            "llama-server-8082",
            "http://[::1]:8082/health",
        ),
        (
            [SERVER, "--host", "0.0.0.0", "--api-prefix", "/llm/"],
            {},
            "llama-server-8080",
            "http://127.0.0.1:8080/llm/health",
        ),
        ([SERVER, "--host", "/run/llama.sock"], {}, "llama-server-4242", None),  # a unix socket
        ([SERVER, "--port", "0"], {}, "llama-server-4242", None),  # a random port
        (["vllm", "serve", "m", "--uds", "/run/vllm.sock"], {}, "vllm-4242", None),
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "-port", "41000"],
            {},
            "ollama-runner-41000",
            None,
        ),
        (["ollama", "runner", "--model", OLLAMA_BLOB], {}, "ollama-runner-4242", None),
    ],
)
def test_ports_come_from_flags_then_variables_else_the_pid_names_the_shard(
    cmdline: list[str], env: dict[str, str], shard: str, health_url: str | None
) -> None:
    d = found(cmdline, env)
    assert (d.spec.id, d.spec.health_url) == (shard, health_url)


# --- the CPU on purpose -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "env", "says"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "0"], {}, "-ngl 0"),
        ([SERVER, "-m", MODEL, "-ngl=0"], {}, "-ngl=0"),
        ([SERVER, "--n-gpu-layers", "0"], {}, "--n-gpu-layers 0"),
        ([SERVER, "--n-gpu-layers=0"], {}, "--n-gpu-layers=0"),
        ([SERVER, "--gpu-layers", "0"], {}, "--gpu-layers 0"),
        ([SERVER, "--gpu-layers=0"], {}, "--gpu-layers=0"),
        ([SERVER, "-ngl", "99", "-ngl", "0"], {}, "-ngl 0"),  # the last one counts
        ([SERVER, "--device", "none"], {}, "--device none"),
        ([SERVER, "-dev", "none"], {}, "-dev none"),
        ([SERVER, "-dev=none"], {}, "-dev=none"),
        ([SERVER, "-sm", "none", "-mg", "-1"], {}, "-sm none -mg -1"),
        ([SERVER], {"LLAMA_ARG_N_GPU_LAYERS": "0"}, "LLAMA_ARG_N_GPU_LAYERS=0"),
        ([SERVER], {"LLAMA_ARG_DEVICE": "none"}, "LLAMA_ARG_DEVICE=none"),
        (["llama-cli", "-m", MODEL, "-ngl", "0"], {}, "-ngl 0"),
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--n-gpu-layers", "0", "--port", "1"],
            {},
            "--n-gpu-layers 0",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--model", MODEL, "--n_gpu_layers", "0"],
            {},
            "--n_gpu_layers 0",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--model", MODEL],
            {},
            "no --n_gpu_layers (llama-cpp-python's default is 0 layers on the GPU)",
        ),
        (["vllm", "serve", "m", "--device", "cpu"], {}, "--device cpu"),
        (["vllm", "serve", "m", "--device=cpu"], {}, "--device=cpu"),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES="),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "-1"}, "CUDA_VISIBLE_DEVICES=-1"),
    ],
)
def test_cpu_on_purpose_is_said_by_the_flag_as_written(
    cmdline: list[str], env: dict[str, str], says: str
) -> None:
    d = found(cmdline, env)
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([], says, None)


def test_amd_mask_that_hides_every_gpu_is_the_cpu_on_purpose() -> None:
    d = found([SERVER], {"HIP_VISIBLE_DEVICES": "-1"}, AMD)
    assert (d.spec.gpus, d.cpu_on_purpose) == ([], "HIP_VISIBLE_DEVICES=-1")


@pytest.mark.parametrize(
    "cmdline",
    [
        [SERVER, "-ngl", "99"],
        [SERVER, "-ngl", "-1"],
        [SERVER, "-ngl", "all"],
        [SERVER, "-ngl", "auto"],
        [SERVER],  # an unset -ngl is the build's default, not a choice of the CPU
        [SERVER, "-m", "model-ngl-0.gguf"],
        ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],  # Ollama's own CPU fallback
        ["vllm", "serve", "m", "--device", "cuda", "-tp", "4"],
    ],
)
def test_layer_counts_other_than_zero_keep_the_gpus(cmdline: list[str]) -> None:
    d = found(cmdline)
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([0, 1, 2, 3], None, None)


def test_the_command_line_overrides_a_variable_that_says_cpu() -> None:
    d = found([SERVER, "-ngl", "99"], {"LLAMA_ARG_N_GPU_LAYERS": "0"})
    assert (d.spec.gpus, d.cpu_on_purpose) == ([0, 1, 2, 3], None)


# --- the intended GPUs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "env", "gpus", "expected"),
    [
        ([SERVER], {}, NODE, [0, 1, 2, 3]),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "2"}, NODE, [2]),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "3,1"}, NODE, [1, 3]),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "GPU-22aa0000-0000-0000-0000-000000000002"}, NODE, [2]),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}, NODE, [0, 2]),
        # mixed GPUs: all of them, in whatever order, are still all of them
        ([SERVER], {}, MIXED, [0, 1]),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, MIXED, [1]),
        ([SERVER], {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, MIXED, [1]),
        # --device picks runtime devices, numbered within the mask
        ([SERVER, "--device", "CUDA1"], {}, NODE, [1]),
        ([SERVER, "--device", "CUDA0,CUDA2"], {}, NODE, [0, 2]),
        ([SERVER, "-dev", "CUDA1"], {"CUDA_VISIBLE_DEVICES": "3,2"}, NODE, [2]),
        ([SERVER, "-dev", "CUDA1,CUDA0"], {"CUDA_VISIBLE_DEVICES": "3,1,0"}, NODE, [1, 3]),
        ([SERVER], {"LLAMA_ARG_DEVICE": "CUDA3"}, NODE, [3]),
        ([SERVER, "-dev", "ROCm1"], {"HIP_VISIBLE_DEVICES": "2,3"}, AMD, [3]),
        ([SERVER, "-dev", "ROCm0"], {}, BOTH, [2]),
        ([SERVER, "-dev", "CUDA1"], {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, MIXED, [1]),
        # -sm none: only the main GPU (-mg, default 0) of the devices
        ([SERVER, "-sm", "none", "-mg", "1"], {}, NODE, [1]),
        ([SERVER, "--split-mode", "none", "--main-gpu", "2"], {}, NODE, [2]),
        ([SERVER, "-sm", "none"], {}, NODE, [0]),
        ([SERVER, "-sm", "none", "-mg", "1"], {"CUDA_VISIBLE_DEVICES": "3,2"}, NODE, [2]),
        ([SERVER, "-dev", "CUDA2,CUDA3", "-sm", "none", "-mg", "1"], {}, NODE, [3]),
        ([SERVER, "-sm", "layer", "-mg", "1"], {}, NODE, [0, 1, 2, 3]),
        ([SERVER, "-sm", "row", "-mg", "1"], {}, NODE, [0, 1, 2, 3]),
        ([SERVER], {"LLAMA_ARG_SPLIT_MODE": "none", "LLAMA_ARG_MAIN_GPU": "3"}, NODE, [3]),
        (
            [
                "python",
                "-m",
                "llama_cpp.server",
                "--model",
                MODEL,
                "--n_gpu_layers",
                "-1",
                "--split_mode",
                "0",
                "--main_gpu",
                "1",
            ],
            {},
            NODE,
            [1],
        ),
        # vLLM: the first tensor x pipeline x data parallel visible GPUs
        (["vllm", "serve", "m"], {}, NODE, [0]),
        (["vllm", "serve", "m", "-tp", "2"], {}, NODE, [0, 1]),
        (
            ["vllm", "serve", "m", "--tensor-parallel-size", "2"],
            {"CUDA_VISIBLE_DEVICES": "2,3"},
            NODE,
            [2, 3],
        ),
        (
            ["vllm", "serve", "m", "--tensor-parallel-size=2"],
            {"CUDA_VISIBLE_DEVICES": "3,1,0"},
            NODE,
            [1, 3],
        ),
        (["vllm", "serve", "m", "--tensor_parallel_size", "2"], {}, NODE, [0, 1]),
        (["vllm", "serve", "m", "-tp", "2", "-pp", "2"], {}, NODE, [0, 1, 2, 3]),
        (
            ["vllm", "serve", "m", "--pipeline-parallel-size", "2"],
            {"CUDA_VISIBLE_DEVICES": "1,2,3"},
            NODE,
            [1, 2],
        ),
        (["vllm", "serve", "m", "-tp", "2", "-dp", "2"], {}, NODE, [0, 1, 2, 3]),
        (["vllm", "serve", "m", "-tp", "8"], {}, NODE, [0, 1, 2, 3]),  # the rest on other nodes
        (["vllm", "serve", "m", "-tp", "2"], {"HIP_VISIBLE_DEVICES": "1,3"}, AMD, [1, 3]),
        (["vllm", "serve", "m", "-tp", "2"], {}, MIXED, [0, 1]),
        (["vllm", "serve", "m"], {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, MIXED, [0]),
        # Ollama: the runner's own mask
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],
            {"CUDA_VISIBLE_DEVICES": "GPU-11aa0000-0000-0000-0000-000000000001"},
            NODE,
            [1],
        ),
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],
            {"ROCR_VISIBLE_DEVICES": "0,2"},
            AMD,
            [0, 2],
        ),
        (["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"], {}, BOTH, [0, 1, 2]),
    ],
)
def test_intended_gpus_from_the_mask_then_the_flags(
    cmdline: list[str], env: dict[str, str], gpus: list[GpuSample], expected: list[int]
) -> None:
    d = found(cmdline, env, gpus)
    assert (d.spec.gpus, d.gpus_unknown, d.cpu_on_purpose) == (expected, None, None)


@pytest.mark.parametrize(
    ("cmdline", "env", "gpus", "reason"),
    [
        (
            [SERVER],
            {"CUDA_VISIBLE_DEVICES": "MIG-4b2a9f60-1234-5678-9abc-def012345678"},
            NODE,
            "CUDA_VISIBLE_DEVICES names a MIG instance (MIG-4b2a9f60-1234-5678-9abc-def012345678), not a whole GPU",
        ),
        (
            [SERVER],
            {"CUDA_VISIBLE_DEVICES": "0"},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs; "
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            ["vllm", "serve", "m"],
            {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
            NODE,
            "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order",
        ),
        (
            [SERVER, "-dev", "CUDA1"],
            {},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which GPU it "
            "picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            [SERVER, "-sm", "none", "-mg", "1"],
            {},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which GPU it "
            "picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            ["vllm", "serve", "m"],
            {},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which GPU it "
            "picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            [SERVER, "-sm", "none"],
            {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
            NODE,
            "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order, so which one "
            "it picked cannot be told",
        ),
        (
            [SERVER],
            {"CUDA_VISIBLE_DEVICES": "7"},
            NODE,
            "CUDA_VISIBLE_DEVICES=7 names no GPU of this node (GPUs 0, 1, 2, 3); check the mask, "
            "or the GPU tools' list of this node's GPUs",
        ),
        (
            [SERVER, "--device", "Vulkan0"],
            {},
            NODE,
            "--device Vulkan0 names Vulkan0, whose number is not a CUDA or ROCm device number; "
            "place this shard in a shards file",
        ),
        (
            [SERVER, "-dev", "CUDA2"],
            {"CUDA_VISIBLE_DEVICES": "0,1"},
            NODE,
            "-dev CUDA2 names CUDA2, but only 2 NVIDIA GPU(s) are visible to it",
        ),
        ([SERVER, "-dev", "ROCm0"], {}, NODE, "this node has no AMD GPU"),
        (
            [SERVER, "-sm", "none", "-mg", "4"],
            {},
            NODE,
            "-sm none with -mg 4, but it sees 4 GPU(s)",
        ),
        (
            ["vllm", "serve", "m", "-tp", "2"],
            {},
            BOTH,
            "vLLM runs on one platform and both NVIDIA and AMD GPUs are visible to it; "
            "set CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES to the ones it should use",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--config_file", "/etc/llama/models.json"],
            {},
            NODE,
            "its settings come from --config_file /etc/llama/models.json, which placewatch does "
            "not read; place this shard in a shards file to say which GPUs it should use",
        ),
    ],
)
def test_gpus_that_cannot_be_told_say_why(
    cmdline: list[str], env: dict[str, str], gpus: list[GpuSample], reason: str
) -> None:
    d = found(cmdline, env, gpus)
    assert (d.gpus_unknown, d.cpu_on_purpose) == (reason, None)


def test_an_unreadable_environment_leaves_the_gpus_unknown() -> None:
    d = classify([SERVER, "-m", MODEL, "-ngl", "99"], None, 4242, NODE)
    assert d is not None
    assert d.gpus_unknown == (
        "its environment could not be read for a device mask (CUDA_VISIBLE_DEVICES, "
        "HIP_VISIBLE_DEVICES); run the worker as root or as the engine's user, or place "
        "this shard in a shards file"
    )
    assert d.cpu_on_purpose is None


@pytest.mark.parametrize(
    ("cmdline", "says"),
    [
        ([SERVER, "-ngl", "0"], "-ngl 0"),
        ([SERVER, "--device", "none"], "--device none"),
        (["vllm", "serve", "m", "--device", "cpu"], "--device cpu"),
    ],
)
def test_an_unreadable_environment_does_not_matter_when_the_command_line_says_cpu(
    cmdline: list[str], says: str
) -> None:
    d = classify(cmdline, None, 4242, NODE)
    assert d is not None
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([], says, None)


def test_llama_cpp_python_without_its_environment_cannot_tell_its_default() -> None:
    d = classify(["python", "-m", "llama_cpp.server", "--model", MODEL], None, 4242, NODE)
    assert d is not None
    assert d.cpu_on_purpose is None
    assert d.gpus_unknown is not None and "could not be read" in d.gpus_unknown


@pytest.mark.parametrize("env", [{}, None, {"CUDA_VISIBLE_DEVICES": "0"}])
def test_a_node_without_gpus_places_every_engine_on_the_cpu(env: dict[str, str] | None) -> None:
    d = classify(["vllm", "serve", "m", "-tp", "2"], env, 4242, [])
    assert d is not None
    assert (d.spec.gpus, d.gpus_unknown) == ([], None)


def test_classify_passes_the_start_time_through() -> None:
    d = classify([SERVER], {}, 4242, NODE, create_time=1700000000.25)
    assert d is not None and d.create_time == 1700000000.25


# --- real processes ---------------------------------------------------------------------

SLEEP = "import time; time.sleep(60)"


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
            env={"PATH": os.environ.get("PATH", ""), **(env or {})},
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


def by_pid(results: list[Discovered], *pids: int) -> list[Discovered]:
    return [d for d in results if d.spec.pid in pids]


def test_a_running_llama_server_is_discovered_with_its_mask_and_start_time(
    tmp_path: Path, children: Children
) -> None:
    before = time.time()
    proc = children.start(
        [str(named(tmp_path, "llama-server")), "-c", SLEEP, "--port", "18080", "-ngl", "99"],
        env={"CUDA_VISIBLE_DEVICES": "GPU-22aa0000-0000-0000-0000-000000000002"},
    )
    after = time.time()
    mine = by_pid(discover(NODE), proc.pid)
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


def test_argv0_alone_names_the_engine(children: Children) -> None:
    proc = children.start(
        ["llama-server", "-c", SLEEP, "--port", "18081", "-ngl", "0"],
        executable=sys.executable,
    )
    mine = discover(NODE, processes=[psutil.Process(proc.pid)])
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
    mine = discover(NODE, processes=psutil.process_iter(["cmdline"]))
    assert [(d.spec.id, d.spec.gpus, d.engine) for d in by_pid(mine, runner.pid, serve.pid)] == [
        ("ollama-runner-43210", [1, 3], "ollama")
    ]


def test_excluded_pids_are_not_discovered(tmp_path: Path, children: Children) -> None:
    proc = children.start([str(named(tmp_path, "llama-cli")), "-c", SLEEP])
    processes = [psutil.Process(proc.pid)]
    assert [d.spec.id for d in discover(NODE, processes=processes)] == [f"llama-cli-{proc.pid}"]
    assert discover(NODE, exclude={proc.pid}, processes=processes) == []
    assert by_pid(discover(NODE, exclude=[proc.pid]), proc.pid) == []


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
    mine = discover(NODE, processes=processes)
    assert [(d.spec.id, d.spec.pid, d.spec.gpus) for d in mine] == [
        ("vllm-18000", parent.pid, [2, 3])
    ]
    assert by_pid(discover(NODE), parent.pid, child) == mine
    # Placed by someone else, the parent keeps its children out of discovery too.
    assert discover(NODE, exclude={parent.pid}, processes=processes) == []


def test_llama_servers_started_by_a_llama_server_on_their_own_ports_are_shards_each(
    tmp_path: Path, children: Children
) -> None:
    script, pid_file = spawner(tmp_path, "router.py", "18091")
    parent = children.start([str(named(tmp_path, "llama-server")), str(script), "--port", "18090"])
    child = started_child(pid_file, children)
    mine = discover(NODE, processes=[psutil.Process(parent.pid), psutil.Process(child)])
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
    parent = children.start([str(named(tmp_path, "llama-server")), str(script), "--port", "18094"])
    child = started_child(pid_file, children)
    assert psutil.Process(child).cmdline() == psutil.Process(parent.pid).cmdline()
    mine = discover(NODE, processes=[psutil.Process(parent.pid), psutil.Process(child)])
    assert [(d.spec.id, d.spec.pid) for d in mine] == [("llama-server-18094", parent.pid)]


def test_two_engines_on_one_port_get_their_pids_in_their_ids(
    tmp_path: Path, children: Children
) -> None:
    server = named(tmp_path, "llama-server")
    one = children.start([str(server), "-c", SLEEP, "--port", "18092"])
    two = children.start([str(server), "-c", SLEEP, "--port", "18092"])
    mine = discover(NODE, processes=[psutil.Process(one.pid), psutil.Process(two.pid)])
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
    assert discover(NODE, processes=[gone_process, zombie_process]) == []


class NoEnviron(psutil.Process):
    """A process whose environment this worker may not read (another user's, without root)."""

    def environ(self) -> dict[str, str]:
        raise psutil.AccessDenied(self.pid)


def test_an_engine_whose_environment_may_not_be_read_is_found_with_gpus_unknown(
    tmp_path: Path, children: Children
) -> None:
    proc = children.start(
        [str(named(tmp_path, "llama-server")), "-c", SLEEP, "--port", "18093"],
        env={"CUDA_VISIBLE_DEVICES": "1"},
    )
    [d] = discover(NODE, processes=[NoEnviron(proc.pid)])
    assert d.spec.id == "llama-server-18093"
    assert d.gpus_unknown is not None and "environment could not be read" in d.gpus_unknown


def test_discover_over_the_whole_node_is_cheap_enough_for_every_tick() -> None:
    discover(NODE)  # psutil keeps its Process objects between calls, as between ticks
    started = time.perf_counter()
    discover(NODE)
    elapsed = time.perf_counter() - started
    count = len(psutil.pids())
    assert elapsed / count < 0.002, f"{elapsed * 1000:.0f} ms for {count} processes"
