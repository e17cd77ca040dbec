"""`placewatch health` against real processes: a worker asked over a real nats-server, and the
heartbeat files that `run`, `watch` and `alerts` write of themselves."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from placewatch.connection import HEARTBEAT, RoundTrips, connect
from placewatch.heartbeat import judge_beat, read_text

from tests.conftest import NatsServer, Worker, clean_env, placewatch_cmd, run_placewatch
from tests.support.eventually import eventually, eventually_async


def health(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_placewatch("health", *args, env=env)


@pytest.fixture
def worker(
    nats_server: NatsServer, tmp_path: Path, workers: list[Worker]
) -> Iterator[tuple[Worker, Path]]:
    beat = tmp_path / "health"
    env = clean_env() | {"PLACEWATCH_NODE": "gpu-h", "PLACEWATCH_NATS": nats_server.url}
    started = Worker("--interval", "0.5", "--health-file", str(beat), env=env)
    workers.append(started)
    eventually(lambda: health("--nats", nats_server.url, "--node", "gpu-h").returncode == 0)
    yield started, beat


def test_a_running_worker_answers_with_a_fresh_sample(
    nats_server: NatsServer, worker: tuple[Worker, Path]
) -> None:
    done = health("--nats", nats_server.url, "--node", "gpu-h")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: node gpu-h's worker answered in ")
    assert "(every 0.5 s, seq " in done.stdout
    assert done.stdout.count("\n") == 1 and done.stderr == ""


def test_a_node_without_a_worker_is_unhealthy_saying_so(
    nats_server: NatsServer, worker: tuple[Worker, Path]
) -> None:
    done = health("--nats", nats_server.url, "--node", "gpu-none")
    assert done.returncode == 1
    assert done.stdout == (
        "unhealthy: no worker answers on placewatch.service.gpu-none.telemetry at "
        f"{nats_server.url}: is `placewatch run` running for node 'gpu-none' (--node, "
        "PLACEWATCH_NODE) and connected to these servers?\n"
    )


def test_no_server_is_unhealthy_saying_where() -> None:
    done = health("--nats", "nats://127.0.0.1:1", "--timeout", "1")
    assert done.returncode == 1
    assert done.stdout.startswith("unhealthy: cannot connect to NATS at nats://127.0.0.1:1 (")


def test_a_stopped_worker_fails_both_checks_and_its_heartbeat_says_why(
    nats_server: NatsServer, worker: tuple[Worker, Path]
) -> None:
    running, beat = worker
    pid = running.proc.pid
    # Written every second: "starting" until the first write after its first tick.
    eventually(lambda: "ticking" in health("--heartbeat", "--health-file", str(beat)).stdout, 5)
    done = health("--heartbeat", "--health-file", str(beat))
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith(f"ok: placewatch run (pid {pid}): ticking: ")
    os.kill(pid, signal.SIGSTOP)
    try:
        asked = health("--nats", nats_server.url, "--node", "gpu-h", "--timeout", "1")
        assert asked.returncode == 1
        assert asked.stdout.startswith(
            "unhealthy: node gpu-h's worker did not answer on placewatch.service.gpu-h.telemetry "
            "within 1 s ("
        )
        eventually(lambda: health("--heartbeat", "--health-file", str(beat)).returncode == 1, 8)
        stale = health("--heartbeat", "--health-file", str(beat)).stdout
        assert stale.startswith(f"unhealthy: placewatch run (pid {pid}) last wrote {beat} ")
        assert stale.endswith("though it writes every 1 s: it is stuck or has stopped\n")
    finally:
        os.kill(pid, signal.SIGCONT)


def test_watch_keeps_a_heartbeat_of_its_own_connection(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    beat = tmp_path / "watch-health"
    env = clean_env() | {"PLACEWATCH_NATS": nats_server.url, "PLACEWATCH_HEALTH_FILE": str(beat)}
    watch = subprocess.Popen(
        [*placewatch_cmd(), "watch"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(beat.exists)
        done = health("--heartbeat", env=env)
        assert done.returncode == 0, done.stdout
        assert done.stdout == (
            f"ok: placewatch watch (pid {watch.pid}): connected to {nats_server.url}: the "
            "server answered a PING 0 s ago\n"
        )
    finally:
        watch.terminate()
        watch.communicate(timeout=10)


def test_a_health_file_in_a_folder_that_does_not_exist_is_refused_at_start(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "h"
    for command in ("watch", "alerts", "run"):
        done = run_placewatch(
            command, "--nats", nats_server.url, "--health-file", str(missing), timeout=20
        )
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr == (
            f"placewatch: health file {missing}: the folder {missing.parent} does not exist; "
            "create it or pick another\n"
        )


def test_a_connection_given_a_heartbeat_file_keeps_it_until_closed(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    path = tmp_path / "h"

    async def main() -> tuple[str, bool]:
        nc = await connect([nats_server.url], "placewatch watch", {HEARTBEAT: str(path)})
        await eventually_async(path.exists, 5, what="the heartbeat file written")
        said = judge_beat(str(path), read_text(str(path)), time.time())
        (task,) = [t for t in asyncio.all_tasks() if "RoundTrips.keep" in repr(t.get_coro())]
        await nc.close()
        await eventually_async(task.done, 5, what="the close ends the heartbeat's task")
        return said[1], task.done()

    said, ended = anyio.run(main, backend="asyncio")
    assert said.startswith(f"placewatch watch (pid {os.getpid()}): connected to ")
    assert ended


def test_a_connection_s_heartbeat_turns_unhealthy_when_its_server_goes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    path = str(tmp_path / "h")

    async def main() -> list[tuple[bool, str]]:
        nc = await connect([nats_server.url], "placewatch alerts")
        trips = RoundTrips(nc, path, "alerts", every=0.2)
        await trips.beat()
        said = [judge_beat(path, read_text(path), time.time())]
        nats_server.stop()
        with anyio.move_on_after(5):
            while judge_beat(path, read_text(path), time.time())[0]:
                await anyio.sleep(0.2)
                await trips.beat()
        said.append(judge_beat(path, read_text(path), time.time()))
        await nc.close()
        return said

    (first_ok, _), (later_ok, later) = anyio.run(main, backend="asyncio")
    assert first_ok
    assert not later_ok
    assert later.startswith("placewatch alerts (pid ")
    assert "no round trip with NATS for 0.6 s (last: " in later
    assert json.loads(Path(path).read_text())["ok"] is False
