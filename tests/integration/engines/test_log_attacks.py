"""A local user (`nobody`) against the log reader: real processes as the engine and the
attacker, the real LogTail and EngineLogs. Nothing it does makes a read wait, and nothing
read is a file its engine could not have written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from placewatch.worker.engines import read_launch
from placewatch.worker.engines.evidence.follow import EngineLogs, Log
from placewatch.worker.engines.evidence.source import HeldLog, PathLog
from placewatch.worker.engines.evidence.tail import LogTail
from placewatch.worker.shards.discover.log_path import find_log

from tests.conftest import clean_env
from tests.support.eventually import eventually
from tests.support.hostile import (
    BANNER,
    NOBODY_UID,
    ON_GPU,
    as_nobody,
    needs_root,
    nobody_engine,
    nobody_folder,
    nobody_runs,
    root_secret,
    stop,
)

pytestmark = needs_root

SECRET = "ggml_cuda_init: failed to initialize CUDA: ROOTONLY-SECRET-4f1c"


@pytest.fixture
def folder() -> Iterator[Path]:
    with nobody_folder() as made:
        yield made


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    stop(started)


def held_log(pid: int) -> HeldLog:
    """The log discovery finds for the engine `pid`, from the real /proc."""
    launch = read_launch(psutil.Process(pid).cmdline())
    assert launch is not None
    found = find_log(launch, psutil.Process(pid).environ(), pid)
    assert isinstance(found, HeldLog)
    return found


def lines_until(tail: LogTail, wanted: str) -> list[str]:
    read: list[str] = []

    def said() -> bool:
        read.extend(tail.poll())
        return wanted in read

    eventually(said, what=repr(wanted))
    return read


def test_a_held_log_swapped_for_a_link_to_a_root_file_is_never_read(
    folder: Path, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    secret = root_secret(tmp_path, SECRET + "\n")
    log = folder / "engine.log"
    procs.append(nobody_engine(folder, log, 18190, clean_env()))
    eventually(lambda: ON_GPU in log.read_text())
    source = held_log(procs[0].pid)
    assert (source.path, source.fd) == (str(log), 2)
    tail = LogTail(source)
    assert lines_until(tail, ON_GPU)[:2] == [BANNER, ON_GPU]

    nobody_runs(f"import os; os.unlink({str(log)!r}); os.symlink({str(secret)!r}, {str(log)!r})")
    read: list[str] = []

    def gone() -> bool:
        read.extend(tail.poll())
        return tail.generation == 1

    eventually(gone, what="the log gone")
    for _ in range(20):
        read += tail.poll()
    assert not any("ROOTONLY" in line for line in read)
    assert tail.refused is None  # what it held is gone: no log, and nothing said of the link
    assert tail.deleted
    # The next discovery walk keeps the deleted file as its log (what it said stands, stale),
    # still never read through the path, which names the link now.
    launch = read_launch(psutil.Process(procs[0].pid).cmdline())
    assert launch is not None
    kept = find_log(launch, {}, procs[0].pid)
    assert kept == HeldLog(str(log), procs[0].pid, 2)
    again = LogTail(kept)
    assert [again.poll() for _ in range(5)] == [[]] * 5
    assert (again.deleted, again.refused) == (True, None)


def test_a_file_held_only_for_reading_is_refused(
    folder: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    readable = folder / "readable.txt"
    readable.write_text(SECRET + "\n")
    readable.chmod(0o644)
    holder = f"import os, time; fd = os.open({str(readable)!r}, os.O_RDONLY); time.sleep(60)"
    procs.append(as_nobody([sys.executable, "-c", holder]))

    def held_as() -> int | None:
        for fd in psutil.Process(procs[0].pid).open_files():
            if fd.path == str(readable):
                return fd.fd
        return None

    eventually(held_as, what="the file held open")
    fd = held_as()
    assert fd is not None
    tail = LogTail(HeldLog(str(readable), procs[0].pid, fd))
    assert tail.poll() == []
    assert tail.refused == (
        f"process {procs[0].pid} holds {readable} open only for reading: it is not what the "
        "engine writes, so it is not read"
    )


def test_a_named_pipe_held_as_the_engine_s_stderr_is_refused_without_waiting(
    folder: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    fifo = folder / "engine.fifo"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY_UID, NOBODY_UID)
    # The engine holds the pipe's write end (its reader holds the other), as a shell's
    # `2> fifo` leaves it.
    reader = as_nobody(["sh", "-c", f"cat {fifo} > /dev/null"])
    procs.append(reader)
    writer = as_nobody(["sh", "-c", f"exec 2> {fifo}; sleep 60"])
    procs.append(writer)
    eventually(lambda: os.path.exists(f"/proc/{writer.pid}/fd/2"))
    eventually(lambda: os.readlink(f"/proc/{writer.pid}/fd/2") == str(fifo))
    tail = LogTail(HeldLog(str(fifo), writer.pid, 2))
    started = time.monotonic()
    assert tail.poll() == []
    assert time.monotonic() - started < 1
    assert tail.refused == f"{fifo} is a named pipe, not a file, so it is not read"


SWAPPER = """
import os, sys, time
path, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < until:
    n += 1
    os.mkfifo(f"{path}.{n}")
    os.replace(f"{path}.{n}", path)
    with open(f"{path}.{n}f", "w") as f:
        f.write("load_tensors: offloaded 33/33 layers to GPU\\n" * (n % 50))
    os.replace(f"{path}.{n}f", path)
"""
"""Swaps `path` between a named pipe and a growing file, as fast as it can."""


def test_a_path_swapped_between_a_file_and_a_named_pipe_never_makes_a_read_wait(
    folder: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    log = folder / "engine.log"
    engine = as_nobody(["sleep", "60"])
    procs.append(engine)
    procs.append(as_nobody([sys.executable, "-c", SWAPPER, str(log), "3"]))
    tail = LogTail(PathLog(str(log), engine.pid))
    refused: set[str] = set()
    slowest = 0.0
    until = time.monotonic() + 2.5
    read = 0
    while time.monotonic() < until:
        started = time.monotonic()
        read += len(tail.poll())
        slowest = max(slowest, time.monotonic() - started)
        if tail.refused:
            refused.add(tail.refused)
    assert slowest < 0.5, f"a poll took {slowest:.2f} s"
    assert f"{log} is a named pipe, not a file, so it is not read" in refused
    assert read > 0  # the file, while it was one, was read


@pytest.mark.parametrize("kind", ["fifo", "symlink", "device", "root-only", "root-folder"])
def test_a_placed_log_path_its_engine_could_not_read_is_refused_naming_it(
    kind: str, folder: Path, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    engine = as_nobody(["sleep", "60"])
    procs.append(engine)
    secret = root_secret(tmp_path, SECRET + "\n")
    log = folder / "engine.log"
    if kind == "fifo":
        os.mkfifo(log)
        why = f"{log} is a named pipe, not a file, so it is not read"
    elif kind == "symlink":
        log.symlink_to(secret)
        why = f"{log} is a symbolic link: a log is read where it is, never where a link points"
    elif kind == "device":
        log = Path("/dev/zero")
        why = "/dev/zero is a character device, not a file, so it is not read"
    elif kind == "root-only":
        log.write_text(SECRET + "\n")
        log.chmod(0o600)
        why = (
            f"{log} may not be read by the engine's user (uid {NOBODY_UID}): it is mode 0600, "
            "owned by uid 0 and gid 0, so it is not read"
        )
    else:
        log = secret
        secret.chmod(0o644)
        mode = stat.S_IMODE(os.stat(tmp_path).st_mode)
        why = (
            f"{log} is in {tmp_path}, which the engine's user (uid {NOBODY_UID}) may not enter "
            f"(mode {mode:04o}, owned by uid 0), so it is not read"
        )
    tail = LogTail(PathLog(str(log), engine.pid))
    started = time.monotonic()
    assert tail.poll() == []
    assert time.monotonic() - started < 1
    assert tail.refused == why


def test_engine_logs_answer_what_a_refused_log_is_and_read_the_rest(
    folder: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    engine = as_nobody(["sleep", "60"])
    procs.append(engine)
    fifo, log = folder / "a.fifo", folder / "b.log"
    os.mkfifo(fifo)
    log.write_text(ON_GPU + "\n")
    os.chown(log, NOBODY_UID, NOBODY_UID)

    async def main() -> None:
        logs = EngineLogs()
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            wanted = {
                "a": Log(PathLog(str(fifo), engine.pid), engine.pid),
                "b": Log(PathLog(str(log), engine.pid), engine.pid),
            }
            said = await logs.read(wanted)
            tg.cancel_scope.cancel()
        assert said["a"].unread == f"{fifo} is a named pipe, not a file, so it is not read"
        assert not said["a"].known
        assert said["b"].layers_offloaded == 33 and said["b"].unread is None

    anyio.run(main, backend="asyncio")
