"""Each shard's process, found by pid or by its command line among real child processes;
one that exits or is replaced noticed; and what a real health URL answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from placewatch.schemas import PlacementSpec
from placewatch.worker.shards.attribution import ProcTable
from placewatch.worker.shards.liveness import (
    SlowPattern,
    Tracked,
    command_lines,
    find_processes,
    first_match,
    readiness,
    settled,
)
from placewatch.worker.shards.placements import Placement

from tests.conftest import SCOPE, free_port, wait_older_than
from tests.support.eventually import eventually
from tests.support.http_endpoint import Endpoint, raw_server

SLEEP = "import time; time.sleep(120)"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def child(started: list[subprocess.Popen[bytes]], marker: str) -> int:
    """A sleeping python process with `marker` as its last argument."""
    started.append(subprocess.Popen([sys.executable, "-c", SLEEP, marker]))
    return started[-1].pid


def tracked(**spec: object) -> Tracked:
    return Tracked(Placement(PlacementSpec(id="s", **spec), "file"))  # type: ignore[arg-type]


def test_a_pid_is_found_with_its_start_time(children: list[subprocess.Popen[bytes]]) -> None:
    pid = child(children, "by-pid")
    table = ProcTable()
    shard = tracked(pid=pid)
    find_processes([shard], table, SCOPE)
    assert shard.pid == pid
    assert shard.create_time == psutil.Process(pid).create_time()
    assert shard.started is not None and shard.started == table.started(pid)
    assert shard.ready is False
    assert settled([shard], table)


def test_a_match_finds_the_oldest_process_whose_command_line_matches(
    children: list[subprocess.Popen[bytes]],
) -> None:
    first = child(children, "shard-match-7f3a")
    wait_older_than([first], 0.05)
    child(children, "shard-match-7f3a")
    child(children, "shard-match-other")
    shard = tracked(match=r"shard-match-7f3a$")

    def found() -> bool:  # a tick whose budget a loaded machine spent is followed by another
        find_processes([shard], ProcTable(), SCOPE)
        return shard.error is None

    eventually(found, timeout=10)
    assert shard.pid == first


def test_a_match_keeps_its_process_while_it_runs(children: list[subprocess.Popen[bytes]]) -> None:
    first = child(children, "kept-9c1e")
    table = ProcTable()
    shard = tracked(match="kept-9c1e")

    def found() -> bool:  # a tick whose budget a loaded machine spent is followed by another
        find_processes([shard], table, SCOPE)
        return shard.pid == first

    eventually(found, timeout=10)
    shard.ready = True
    child(children, "kept-9c1e")
    find_processes([shard], table, SCOPE)
    assert (shard.pid, shard.ready) == (first, True)


def test_no_matching_process_leaves_the_shard_without_one() -> None:
    shard = tracked(match="no-process-has-this-d41d8cd98f")
    find_processes([shard], ProcTable(), SCOPE)
    assert (shard.pid, shard.started, shard.create_time) == (None, None, None)


def test_an_exited_process_is_forgotten(children: list[subprocess.Popen[bytes]]) -> None:
    pid = child(children, "exits")
    table = ProcTable()
    shard = tracked(pid=pid)
    find_processes([shard], table, SCOPE)
    shard.ready = True
    children[0].kill()
    children[0].wait()
    table.refresh()  # as each tick starts
    assert not settled([shard], table)
    find_processes([shard], table, SCOPE)
    assert (shard.pid, shard.started, shard.create_time, shard.ready) == (None, None, None, False)


def test_a_pid_that_started_at_another_time_is_a_new_process_not_yet_ready(
    children: list[subprocess.Popen[bytes]],
) -> None:
    # What a reused pid looks like: the pid remembered, its start time not this process's.
    pid = child(children, "reused")
    table = ProcTable()
    shard = tracked(pid=pid)
    find_processes([shard], table, SCOPE)
    started = shard.started
    assert started is not None
    shard.started, shard.ready = started - 100, True
    assert not settled([shard], table)
    find_processes([shard], table, SCOPE)
    assert (shard.pid, shard.started, shard.ready) == (pid, started, False)


def test_a_placement_moved_to_another_pid_is_not_settled(
    children: list[subprocess.Popen[bytes]],
) -> None:
    old, new = child(children, "old"), child(children, "new")
    table = ProcTable()
    shard = tracked(pid=old)
    find_processes([shard], table, SCOPE)
    shard.placement = Placement(PlacementSpec(id="s", pid=new), "file")
    assert not settled([shard], table)
    find_processes([shard], table, SCOPE)
    assert shard.pid == new


HOSTILE = "--port" * 20_000
"""120,000 bytes in one argument (the kernel takes up to 128 KiB), on which `.*--port.*8081`
backtracks for hours with Python's re and for seconds with the regex module."""


ADVICE = "; give a pattern with fewer open-ended repeats (`.*`, `+`), anchored on the engine's name"


def test_a_pattern_that_backtracks_on_a_hostile_command_line_is_cut_short(
    children: list[subprocess.Popen[bytes]],
) -> None:
    """Anyone on the node may start a process with such a command line; an ordinary pattern
    must not stall the worker on it. The shard is `unknown` with why, not `gone`."""
    hostile = child(children, HOSTILE)
    shard = tracked(match=r".*--port.*8081")
    thread = threading.Thread(
        target=find_processes, args=([shard], ProcTable(), SCOPE), daemon=True
    )
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the search was not cut short"
    assert shard.pid is None and shard.error is not None
    assert shard.error.startswith("its `match` was not searched to the end of the command line")
    assert str(hostile) in shard.error
    assert shard.error.endswith(
        "(it may take 20 ms a line, and every shard's 100 ms a tick)" + ADVICE
    )


def test_a_match_past_a_hostile_command_line_is_still_found(
    children: list[subprocess.Popen[bytes]],
) -> None:
    child(children, HOSTILE)
    wanted = child(children, "--port 8081 shard-5d1c")
    shard = tracked(match=r".*--port.*8081 shard-5d1c")

    def found() -> bool:  # a tick whose budget a loaded machine spent is followed by another
        find_processes([shard], ProcTable(), SCOPE)
        return (shard.pid, shard.error) == (wanted, None)

    eventually(found, timeout=10)


def test_the_searches_stop_at_the_ticks_budget_and_name_what_they_left() -> None:
    lines = [(0.0, pid, HOSTILE) for pid in range(100, 140)]
    # 20 ms a line, 100 ms in all: the budget ends the search long before the last line.
    with pytest.raises(SlowPattern) as slow:
        first_match(r".*--port.*8081", [*lines, (0.0, 999, "--port 8081")], time.monotonic() + 0.1)
    assert str(slow.value) == (
        "its `match` was not searched to the end of the command line of 41 processes: "
        "pid 100, 101, 102, 103, 104, ... (it may take 20 ms a line, and every shard's "
        "100 ms a tick)" + ADVICE
    )
    # Once the budget is spent, the shards after are told so without a search.
    with pytest.raises(SlowPattern) as slow:
        first_match("--port 8081", [(0.0, 7, "--port 8081")], time.monotonic())
    assert "the command line of pid 7 (" in str(slow.value)
    assert first_match("--port 8081", [(0.0, 7, "--port 8081")], time.monotonic() + 1) == 7
    assert first_match("--port 8082", [(0.0, 7, "--port 8081")], time.monotonic() + 1) is None


def test_command_lines_list_children_oldest_first_and_not_this_process(
    children: list[subprocess.Popen[bytes]],
) -> None:
    first = child(children, "listed-a")
    wait_older_than([first], 0.05)
    second = child(children, "listed-b")
    found = command_lines()
    pids = [pid for _, pid, _ in found]
    assert pids.index(first) < pids.index(second)
    assert psutil.Process().pid not in pids
    commands = {pid: cmd for _, pid, cmd in found}
    assert commands[second] == f"{sys.executable} -c {SLEEP} listed-b"
    assert [t for t, _, _ in found] == sorted(t for t, _, _ in found)


@pytest.mark.parametrize(("status", "said"), [(200, "ok"), (204, "ok"), (503, "not ready")])
def test_health_is_what_the_url_answers(status: int, said: str) -> None:
    endpoint = Endpoint(status=status)
    try:
        assert readiness(f"{endpoint.base}/health") == said
        assert [(r.method, r.path) for r in endpoint.requests] == [("GET", "/health")]
    finally:
        endpoint.close()


def test_health_with_nothing_listening_is_unreachable() -> None:
    assert readiness(f"http://127.0.0.1:{free_port()}/health") == "unreachable"


def test_health_that_never_answers_is_unreachable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts, never answers
        assert readiness(f"http://127.0.0.1:{listener.getsockname()[1]}/health") == "unreachable"


def test_health_of_a_url_that_is_not_one_is_unreachable() -> None:
    assert readiness("not a url") == "unreachable"


def test_health_follows_no_redirect() -> None:
    target = Endpoint(status=200)
    moved = f"HTTP/1.1 302 Found\r\nLocation: {target.base}/elsewhere\r\nContent-Length: 0\r\n\r\n"
    try:
        with raw_server(moved.encode()) as base:
            assert readiness(f"{base}/health") == "not ready"
        assert target.requests == []  # the place it pointed to was never asked
    finally:
        target.close()


def test_health_goes_through_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy from the environment would see the URL, its query's token included.
    proxy, engine = Endpoint(status=200), Endpoint(status=503)
    monkeypatch.setenv("http_proxy", proxy.base)
    monkeypatch.setenv("HTTP_PROXY", proxy.base)
    try:
        assert readiness(f"{engine.base}/health?token=s3cret") == "not ready"
        assert proxy.requests == []
        assert [r.path for r in engine.requests] == ["/health?token=s3cret"]
    finally:
        proxy.close()
        engine.close()


@pytest.mark.parametrize(
    "answer", [b"garbage, not HTTP\r\n\r\n", b"HTTP/1.1 200 " + b"x" * 70000 + b"\r\n\r\n"]
)
def test_health_of_a_server_that_does_not_speak_http_is_unreachable(answer: bytes) -> None:
    # http.client raises these as HTTPException, not OSError: they must not stop the tick.
    with raw_server(answer) as base:
        assert readiness(f"{base}/health") == "unreachable"


def test_health_of_a_url_whose_port_is_not_a_number_is_unreachable() -> None:
    assert readiness("http://127.0.0.1:80x/health") == "unreachable"
