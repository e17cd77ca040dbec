"""A real llama-server's log, read as the worker reads it: the build of the real-engine lane
(tests/support/llama_server.py) loads tests/support/tiny_gguf.py's model. Skipped, saying how
to have one, where there is none; fixtures/engine-logs/real-b11434 holds what b11434 printed.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from placewatch.worker.engines.evidence.read import read_text

from tests.support.llama_server import LlamaServers

MiB = 1 << 20


@pytest.fixture
def run_server(llama_servers: LlamaServers, tmp_path: Path) -> Callable[..., str]:
    """Runs the server with some arguments until /health answers, stops it with SIGINT, and
    returns everything it wrote to stdout and stderr."""

    def run(*args: str) -> str:
        log = tmp_path / f"server-{len(llama_servers.procs)}.log"
        with log.open("wb") as out:
            proc, _ = llama_servers.start(*args, stdout=out, stderr=subprocess.STDOUT)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        return log.read_text(errors="replace")

    return run


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
