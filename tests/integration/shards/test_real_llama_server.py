"""A real llama-server's log, read as the worker reads it: the build of the real-engine lane
(tests/support/llama_server.py) loads tests/support/tiny_gguf.py's model. Skipped, saying how
to have one, where there is none; fixtures/engine-logs/real-b11434 holds what b11434 printed.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from placewatch.shards.engine_log.read import read_text

from tests.conftest import free_port
from tests.support import tiny_gguf

MiB = 1 << 20


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gguf.write(tmp_path_factory.mktemp("model") / "tiny.gguf")


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(port: int) -> bool:
    try:
        with NO_PROXY.open(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture
def run_server(
    model: Path, tmp_path: Path, llama_server_binary: Path
) -> Iterator[Callable[..., str]]:
    """Runs the server with some arguments until /health answers, stops it with SIGINT, and
    returns everything it wrote to stdout and stderr."""
    started: list[subprocess.Popen[bytes]] = []

    def run(*args: str) -> str:
        port, log = free_port(), tmp_path / f"server-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    str(llama_server_binary),
                    "-m",
                    str(model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        deadline = time.monotonic() + 60
        while not healthy(port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no /health after 60 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        return log.read_text(errors="replace")

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_real_server_at_lv4_says_its_verbosity_and_where_its_weights_are(
    run_server: Callable[..., str],
) -> None:
    ev = read_text(run_server("-ngl", "99", "-lv", "4"))
    assert (ev.engine, ev.verbosity) == ("llama.cpp", 4)
    weights = (ev.cpu_weight_bytes or 0) + (ev.gpu_weight_bytes or 0)
    assert weights == pytest.approx(0.46 * MiB, abs=0.02 * MiB)  # the model, counted once
    if ev.cpu_only_build:
        assert ev.gpu_failed is not None and "no usable GPU found" in ev.gpu_failed
        assert any("compiled without GPU support" in line for line in ev.lines)
    else:
        assert ev.layers_offloaded == ev.layers_total == 3  # 2 layers and the output


def test_a_real_server_at_default_verbosity_hides_its_load_lines(
    run_server: Callable[..., str],
) -> None:
    ev = read_text(run_server())
    assert (ev.engine, ev.load_lines_hidden) == ("llama.cpp", True)
    assert ev.layers_offloaded is None and ev.cpu_weight_bytes is None


def test_a_real_server_at_lv5_counts_the_model_once_after_fits_dry_run(
    run_server: Callable[..., str],
) -> None:
    text = run_server("-lv", "5")
    assert text.count("load_tensors: loading model tensors") == 2  # --fit's dry run, the load
    ev = read_text(text)
    weights = (ev.cpu_weight_bytes or 0) + (ev.gpu_weight_bytes or 0)
    assert weights == pytest.approx(0.46 * MiB, abs=0.02 * MiB)
