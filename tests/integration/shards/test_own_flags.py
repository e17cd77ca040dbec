"""A placed engine's own CPU flags, read from its running process's command line and
environment: a real child named as the engine (its argv[0]), with the engine's flags."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from placewatch.worker.shards.liveness import own_flags

from tests.conftest import SLEEP
from tests.support.eventually import eventually


@contextmanager
def engine(argv0: str, *args: str, env: dict[str, str] | None = None) -> Iterator[int]:
    proc = subprocess.Popen([argv0, "-c", SLEEP, *args], executable=sys.executable, env=env or {})
    try:
        # read once it runs as the engine: just after fork, /proc shows the parent's
        eventually(lambda: psutil.Process(proc.pid).cmdline()[:1] == [argv0], timeout=10)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("argv0", "args", "env", "said"),
    [
        ("llama-server", ("-m", "x.gguf", "-ngl", "0"), None, "-ngl 0"),
        ("llama-server", ("-m", "x.gguf", "--device", "none"), None, "--device none"),
        (
            "llama-server",
            ("-m", "x.gguf"),
            {"LLAMA_ARG_N_GPU_LAYERS": "0"},
            "LLAMA_ARG_N_GPU_LAYERS=0",
        ),
        ("llama-server", ("-m", "x.gguf", "-ngl", "99"), None, None),
        ("llama-server", ("-m", "x.gguf", "-ngl", "0", "-ngl", "99"), None, None),
        ("bash", ("-ngl", "0"), None, None),
    ],
)
def test_a_running_engine_s_own_flags(
    argv0: str, args: tuple[str, ...], env: dict[str, str] | None, said: str | None
) -> None:
    with engine(argv0, *args, env=env) as pid:
        assert own_flags(pid) == (said, False)


def test_a_router_is_told() -> None:
    with engine("llama-server", "--models-dir", "/models", "-ngl", "99") as pid:
        assert own_flags(pid) == (None, True)
    with engine("llama-server", "--models-dir", "/models", "-m", "x.gguf") as pid:
        assert own_flags(pid) == (None, False)  # a model of its own: no router
    with engine("llama-server", "--port", "8080") as pid:
        assert own_flags(pid) == (None, True)  # no model at all: b11434 routes over its cache


def test_a_process_gone_has_no_flag() -> None:
    with engine("llama-server", "-ngl", "0") as pid:
        pass
    assert own_flags(pid) == (None, False)
