"""Asking a process called `ollama serve`, which anyone on the node may run: over real
loopback TCP, an answer that stalls, trickles or runs long costs the asker its deadline at
most and gives nothing; only the port the process itself listens on is asked."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from placewatch.worker.engines.ollama.server import MAX_ANSWER, address, ask

REQUEST = b"GET /api/ps HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture
def listener() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """A loopback server answering each connection with `serve(conn)` in a thread."""
    sockets: list[socket.socket] = []

    def start(serve: Callable[[socket.socket], None]) -> int:
        sock = socket.create_server(("127.0.0.1", 0))
        sockets.append(sock)

        def accept() -> None:
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                sockets.append(conn)
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return int(sock.getsockname()[1])

    yield start
    for sock in sockets:
        sock.close()


def timed(port: int, within: float) -> tuple[bytes | None, float]:
    started = time.monotonic()
    said = ask("127.0.0.1", port, REQUEST, started + within)
    return said, time.monotonic() - started


def test_an_answer_is_read_to_its_end(listener: Callable[..., int]) -> None:
    def serve(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"models": []}')
        conn.close()

    assert timed(listener(serve), 5)[0] == b'{"models": []}'


@pytest.mark.parametrize("how", ["silent", "trickle"])
def test_a_server_that_stalls_costs_its_deadline_and_gives_nothing(
    listener: Callable[..., int], how: str
) -> None:
    def serve(conn: socket.socket) -> None:
        conn.recv(4096)
        if how == "trickle":  # a byte at a time, well inside any one read's timeout
            with contextlib.suppress(OSError):  # until the test closes it
                for _ in range(10_000):
                    conn.sendall(b"HTTP/1.0 200 OK\r\n"[:1])
                    time.sleep(0.01)
        threading.Event().wait(30)

    said, took = timed(listener(serve), 0.3)
    assert said is None
    assert took < 1.0


def test_an_answer_past_its_bound_gives_nothing(listener: Callable[..., int]) -> None:
    def serve(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + b" " * (MAX_ANSWER + 10))
        conn.close()

    assert timed(listener(serve), 5)[0] is None


def test_a_port_nothing_listens_on_gives_nothing_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    said, took = timed(port, 5)
    assert said is None and took < 1.0


def test_the_port_asked_is_one_the_process_listens_on_itself() -> None:
    code = (
        "import socket, sys, time\n"
        "s = socket.create_server(('127.0.0.1', 0))\n"
        "print(s.getsockname()[1], flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert address(proc.pid) == ("127.0.0.1", port)
        assert address(2**22 + 1) is None  # no such process
    finally:
        proc.kill()
        proc.wait()
