"""Ollama since 0.30: its server a router, its own llama-server each model's process, the
server's log read as it is today (tests/fixtures/ollama, synthesized from Ollama's source at
fb30760, its README naming each line's file)."""

from __future__ import annotations

import pytest

from placewatch.worker.engines import OLLAMA, Launch, read_launch
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.engines.ollama import ENGINE
from placewatch.worker.shards.discover import classify

from tests.conftest import FIXTURES
from tests.support.discovery import A100X4
from tests.unit.engines.readings import Reading, mib, reading

HERE = FIXTURES / "ollama"
BLOB = "/usr/share/ollama/.ollama/models/blobs/sha256-dde5aa3fc5ffc17176b5e8bdc82f587b24b2678c6c66101bf7da77af9f7ccdff"
CHILD = "/usr/local/lib/ollama/llama-server"
ARGV = (
    "--model", BLOB, "--port", "41127", "--host", "127.0.0.1", "--no-webui", "--offline",
    "-c", "32768", "-np", "1", "--log-verbosity", "4", "--no-log-prefix",
    "--no-log-timestamps", "--flash-attn", "auto", "-b", "512", "-ub", "512",
)  # fmt: skip
"""llm/llama_server.go's arguments for a model whose options set no num_gpu."""


def child(*args: str, path: str = CHILD) -> Launch | None:
    """What Ollama's server makes of a process it started (None: no shard; `--list-devices`
    is no server to any reader)."""
    server = read_launch(["/usr/local/bin/ollama", "serve"])
    launch = read_launch([path, *args])
    assert server is not None
    return ENGINE.router_child(server, path, launch) if launch is not None else None


@pytest.mark.parametrize(
    "cmdline",
    [
        ["/usr/local/bin/ollama", "serve"],
        ["ollama", "serve"],
        ["python3", "/opt/wrapped/bin/ollama", "serve"],  # its executable a wrapper
    ],
)
def test_its_server_is_a_router_and_no_shard(cmdline: list[str]) -> None:
    launch = read_launch(cmdline)
    assert launch is not None
    assert (launch.engine, launch.router, launch.default_port) == (OLLAMA, True, 11434)
    assert not launch.child_prefix  # it copies its children's lines as they are
    assert classify(cmdline, {}, 4242, A100X4) is None


def test_its_llama_server_is_an_ollama_shard_serving_health() -> None:
    launch = child(*ARGV)
    assert launch is not None
    assert (launch.engine, launch.name, launch.serves, launch.health) == (
        OLLAMA, "ollama", True, True,
    )  # fmt: skip
    assert ENGINE.served_model(launch) == BLOB.rsplit("/", 1)[-1]
    d = classify([CHILD, *ARGV], {"CUDA_VISIBLE_DEVICES": "GPU-2"}, 4242, A100X4, launch=launch)
    assert d is not None
    assert (d.engine, d.spec.health_url, d.spec.gpus) == (
        OLLAMA, "http://127.0.0.1:41127/health", [2],
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("--port", "49152", "--host", "127.0.0.1", "--no-webui", "--offline", "--verbose"),
        ("--list-devices", "--offline", "--verbose"),
    ],
    ids=["system-info-probe", "list-devices"],
)
def test_its_gpu_discovery_probes_are_no_shard(args: tuple[str, ...]) -> None:
    assert child(*args) is None


def test_a_llama_server_it_did_not_ship_is_read_as_llama_cpp_s() -> None:
    launch = child(*ARGV, path="/opt/llama.cpp/build/bin/llama-server")
    assert launch is not None and launch.engine == "llama.cpp"


def test_its_runner_before_0_30_stays_a_runner() -> None:
    server = read_launch(["ollama", "serve"])
    runner = read_launch(["/usr/bin/ollama", "runner", "--model", BLOB, "--port", "41000"])
    assert server is not None and runner is not None
    assert ENGINE.router_child(server, "/usr/bin/ollama", runner) is runner


def test_num_gpu_0_is_the_cpu_on_purpose_and_no_ngl_asks_for_gpus() -> None:
    launch = child(*ARGV, "-ngl", "0")
    d = classify([CHILD, *ARGV, "-ngl", "0"], {}, 4242, A100X4, launch=launch)
    assert d is not None and d.cpu_on_purpose == "-ngl 0"
    silent = classify([CHILD, *ARGV], {}, 4242, [], tools_silent=["nvml"], launch=child(*ARGV))
    assert silent is not None
    assert silent.gpu_request == "Ollama's llama-server without -ngl, which offloads what fits"


READINGS: dict[str, Reading] = {
    "0.33-cuda-full.stderr.log": Reading(
        OLLAMA, "CUDA", "CUDA", (29, 29), devices=("CUDA0",),
        found=("GPU-6f1c2b9e-2a4d-6b37-91e0-3c5d7a8e4f12", "CUDA0"),
        gpu_bytes=mib(1918.35), cpu_bytes=mib(308.23), verbosity=4,
    ),
    "0.33-cpu-cuda-init-failed.stderr.log": Reading(
        OLLAMA, "CPU", "CUDA", failed="ggml_cuda_init: failed to initialize CUDA",
        found=("GPU-6f1c2b9e-2a4d-6b37-91e0-3c5d7a8e4f12",), gpu_bytes=0,
        cpu_bytes=mib(1918.35, 1299.00), verbosity=4,
    ),
    "0.33-cpu-no-gpu-discovered.journal.log": Reading(
        OLLAMA, "CPU", gpu_bytes=0, cpu_bytes=mib(1918.35), verbosity=4, cpu_only=True,
        no_gpu_listed=True,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(READINGS))
def test_its_log_today_reads_as_made(name: str) -> None:
    want = READINGS[name]
    assert reading(read_text((HERE / name).read_text()), want.failed) == want


@pytest.mark.parametrize("stem", ["0.33-cuda-full", "0.33-cpu-cuda-init-failed"])
def test_the_journal_reads_as_the_file(stem: str) -> None:
    file = read_text((HERE / f"{stem}.stderr.log").read_text())
    journal = read_text((HERE / f"{stem}.journal.log").read_text())
    assert (journal.engine, journal.backend, journal.gpu_failed, journal.layers_offloaded) == (
        file.engine, file.backend, file.gpu_failed, file.layers_offloaded,
    )  # fmt: skip


def test_each_model_s_start_begins_its_evidence() -> None:
    cpu = (HERE / "0.33-cpu-cuda-init-failed.stderr.log").read_text()
    gpu = (HERE / "0.33-cuda-full.stderr.log").read_text()
    assert read_text(cpu + gpu) == read_text(gpu)
    reloaded = read_text(gpu + cpu)
    assert (reloaded.backend, reloaded.layers_offloaded) == ("CPU", None)
    assert reloaded.lines[0].startswith('msg="starting llama-server" cmd="/usr/local/lib/ollama/')


def test_its_start_with_ngl_0_says_the_cpu() -> None:
    line = (
        "time=2026-08-22T11:02:10.551-07:00 level=INFO source=llama_server.go:433 "
        f'msg="starting llama-server" cmd="{CHILD} {" ".join(ARGV)} -ngl 0"'
    )
    ev = read_text(line)
    assert (ev.engine, ev.backend, ev.layers_offloaded) == (OLLAMA, "CPU", 0)
