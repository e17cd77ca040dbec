"""`placewatch doctor`'s engine-logs check on real processes whose log the worker cannot read:
one whose log file was deleted while it writes to it, one whose stderr goes to a pipe (each
a Python process classified by a llama-server's command line)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from placewatch.worker.doctor.logs import WRITE_AGAIN, check_logs
from placewatch.worker.doctor.report import Report
from placewatch.worker.engines import read_launch
from placewatch.worker.engines.evidence.source import HeldLog
from placewatch.worker.shards.discover import Discovered
from placewatch.worker.shards.discover.classify import classify
from placewatch.worker.shards.discover.log_path import piped_output

ENGINE = ["llama-server", "-m", "model.gguf", "--port", "18123"]
"""The command line each stand-in process is classified by (it runs Python)."""


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A process writing its stderr to a file, and the file."""
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stderr=out)
    yield proc, log
    proc.kill()
    proc.wait()


def doctor(found: Discovered) -> list[str]:
    said: list[str] = []
    check_logs([found], [], Report(said.append))
    return said


def engine(pid: int, log: HeldLog | None = None) -> Discovered:
    found = classify(ENGINE, {}, pid, [], log=log)
    assert found is not None
    return found


def test_a_log_deleted_under_its_engine_fails_and_says_so(
    writer: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, log = writer
    held = HeldLog(str(log), proc.pid, 2)
    assert doctor(engine(proc.pid, held)) == [
        "ok    engine logs: 1 log followed, each written by one engine"
    ]
    log.unlink()
    said = doctor(engine(proc.pid, held))
    assert len(said) == 1 and said[0].startswith("fail  engine logs: llama-server-18123: ")
    assert f"its log is not read: {log} was deleted while its process writes to it" in said[0]
    assert f"next: {WRITE_AGAIN}" in said[0]


def test_an_engine_whose_output_goes_to_a_pipe_fails_and_says_how_to_read_it() -> None:
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.DEVNULL,
        stderr=write_end,
    )
    os.close(write_end)
    try:
        launch = read_launch(ENGINE)
        assert launch is not None
        found = replace(engine(proc.pid), unlogged=piped_output(launch, proc.pid))
        link = os.readlink(f"/proc/{proc.pid}/fd/2")
        said = doctor(found)
    finally:
        proc.kill()
        proc.wait()
        os.close(read_end)
    assert link.startswith("pipe:[")
    assert len(said) == 1, said
    assert said[0].startswith(
        f"fail  engine logs: llama-server-18123: it has no log: its output goes to a pipe "
        f"(stderr, fd 2: {link}), which only the process at its other end reads"
    )
    assert "next: send it to a file (> FILE 2>&1; or --log-file FILE)" in said[0]
