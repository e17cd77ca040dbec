"""The suite is sealed from the machine it runs on: engines another job runs there are none
of a test's shards (tests/conftest.py's SEAL, the workers' `--discover-env`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SEAL, SLEEP, clean_env, free_port, run_placewatch
from tests.support.eventually import eventually


@pytest.fixture
def foreign_engine(tmp_path: Path) -> Iterator[int]:
    """A llama-server as another job on the machine runs it: started without the test's mark,
    an executable named llama-server (a copy of this Python, so its /proc/PID/exe is one)."""
    build = tmp_path / "llama-server"
    shutil.copy(sys.executable, build)
    env = {k: v for k, v in os.environ.items() if k != SEAL}
    port = str(free_port())
    proc = subprocess.Popen(
        [str(build), "-c", SLEEP, "-m", "/models/x.gguf", "-ngl", "99", "--port", port],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: len(Path(f"/proc/{proc.pid}/cmdline").read_bytes()) > 0, timeout=10)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def shard_pids(env: dict[str, str]) -> list[int | None]:
    done = run_placewatch("sample", "--json", "--grace", "0", env=env)
    assert done.returncode == 0, done.stderr
    return [brief.get("pid") for brief in json.loads(done.stdout)["shards"]]


def test_a_test_worker_does_not_see_an_engine_another_job_runs(foreign_engine: int) -> None:
    assert foreign_engine not in shard_pids(clean_env())


def test_without_the_seal_the_same_worker_would_see_it(foreign_engine: int) -> None:
    unsealed = {k: v for k, v in clean_env().items() if k != "PLACEWATCH_DISCOVER_ENV"}
    assert foreign_engine in shard_pids(unsealed)


def test_doctor_runs_no_build_of_an_engine_another_job_runs(foreign_engine: int) -> None:
    done = run_placewatch("doctor", "--nats", "nats://127.0.0.1:1", "--timeout", "2")
    assert str(foreign_engine) not in done.stdout
    assert "no llama.cpp engine running" in done.stdout
