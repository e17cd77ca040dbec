"""The metrics server the exporter and the worker share: a connection that sends no whole
request head in time let go, at most so many served at once, a newcomer evicting the oldest
still waiting for its head, a scrape answered through a flood of slow connections; real
sockets on loopback."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from placewatch.prometheus import server as metrics_server
from placewatch.prometheus.exposition import Family

from tests.support.eventually import eventually
from tests.support.slow_clients import flooding

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
"""What Prometheus 2.42 sends."""


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        body: bytes = answer.read()
    return body.decode()


def closed(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def slow(port: int) -> socket.socket:
    """A connection that begins its request head and sends no more of it."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: slow\r\n")
    conn.settimeout(0.05)
    return conn


@contextmanager
def serving(families: metrics_server.Families) -> Iterator[int]:
    server, thread = metrics_server.serve("127.0.0.1", 0, families)
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


SEEN = Family("scrapes_seen_total", "a series to serve", (), "counter", [("", 1.0)])


ENDING = 8
"""Threads that freed their slot and have not ended yet, which a count may catch."""


def test_a_scrape_is_answered_while_1000_slow_connections_are_held() -> None:
    before = threading.active_count()
    with serving(lambda: [SEEN]) as port, flooding("127.0.0.1", port, 1000) as flood:
        assert metrics_server.BACKLOG >= 1000  # the flood waits in it, a scrape behind it
        for _ in range(3):
            started = time.monotonic()
            assert "scrapes_seen_total 1.0\n" in scrape(port)
            assert time.monotonic() - started < 5
            threads = threading.active_count() - before - 1  # the server's own
            assert threads <= metrics_server.MAX_CONNECTIONS + ENDING
        # the server closed the slow ones to take the scrapes, and they came back
        assert flood.stop() > 0


def test_a_connection_without_its_whole_head_in_time_is_closed() -> None:
    with serving(lambda: [SEEN]) as port:
        conn = slow(port)
        opened = time.monotonic()
        try:
            for byte in b"X-Slow: abc":  # a byte at a time: each read waits less than HEAD_S
                conn.sendall(bytes([byte]))
                if closed(conn):
                    break
            eventually(lambda: closed(conn), metrics_server.HEAD_S + 3)
            assert time.monotonic() - opened >= metrics_server.HEAD_S - 0.1
        finally:
            conn.close()


def test_a_newcomer_evicts_the_oldest_waiting_for_its_head_never_one_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_server, "MAX_CONNECTIONS", 4)
    building = threading.Event()
    go_on = threading.Event()

    def families() -> list[Family]:
        building.set()
        go_on.wait(10)  # this scrape is being answered while the others come
        return [SEEN]

    answers: list[str] = []
    conns: list[socket.socket] = []
    with serving(families) as port:
        before = threading.active_count()
        answering = threading.Thread(target=lambda: answers.append(scrape(port)))
        answering.start()
        try:
            eventually(building.is_set, 5, what="the first scrape being answered")
            conns += [slow(port) for _ in range(3)]  # the four slots taken
            conns += [slow(port) for _ in range(2)]  # each evicts the oldest waiting
            eventually(lambda: closed(conns[0]) and closed(conns[1]), 5)
            assert not any(closed(c) for c in conns[2:])
            eventually(lambda: threading.active_count() - before <= 4 + 1, 5)  # and the scraper
            go_on.set()
            answering.join(10)
            (answer,) = answers
            assert "scrapes_seen_total 1.0\n" in answer
        finally:
            go_on.set()
            for conn in conns:
                conn.close()


def test_head_is_answered_with_the_headers_alone() -> None:
    with serving(lambda: [SEEN]) as port:
        body = scrape(port).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
    head, _, after = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK\r\n"), head
    assert f"Content-Length: {len(body)}".encode() in head.split(b"\r\n")
    assert after == b""


@pytest.mark.parametrize(
    ("accept", "encoding", "content_type"),
    [
        (None, None, "text/plain; version=0.0.4; charset=utf-8"),
        (PROMETHEUS_ACCEPT, None, "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        (PROMETHEUS_ACCEPT, "gzip", "application/openmetrics-text; version=1.0.0; charset=utf-8"),
    ],
)
def test_it_answers_in_the_format_and_encoding_asked_for(
    accept: str | None, encoding: str | None, content_type: str
) -> None:
    seen = Family("scrapes_seen_total", "a series to serve", ("node",), "counter")
    seen.add(["gpu-07"], 3.0)
    server, thread = metrics_server.serve("127.0.0.1", 0, lambda: [seen])
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{server.server_address[1]}/metrics")
        for header, value in (("Accept", accept), ("Accept-Encoding", encoding)):
            if value is not None:
                request.add_header(header, value)
        with urllib.request.urlopen(request, timeout=5) as answer:
            body, headers = answer.read(), answer.headers
        assert headers["Content-Type"] == content_type
        assert headers.get("Content-Encoding") == encoding
        text = (gzip.decompress(body) if encoding else body).decode()
        assert 'scrapes_seen_total{node="gpu-07"} 3.0\n' in text
        assert text.endswith("# EOF\n") == (accept is not None)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def many_rows(rows: int) -> Family:
    family = Family("rows_total", "many rows", ("row",), "counter")
    for i in range(rows):
        family.add([f"row-{i:07d}"], float(i))
    return family


@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_a_streamed_body_comes_in_pieces_without_a_length(encoding: str | None) -> None:
    """A fleet's body (`streamed`): the families in parts, joined in the order given, written
    as they are made; the answer ends with its connection."""
    first, second = Family("a", "first", ("n",)), Family("b", "second", ("n",))
    more = Family("a", "first", ("n",))
    first.add(["1"], 1.0)
    second.add(["2"], 2.0)
    more.add(["3"], 3.0)
    server, thread = metrics_server.serve(
        "127.0.0.1", 0, lambda: [second, first, more, many_rows(50_000)], ["a", "b", "rows_total"]
    )
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{server.server_address[1]}/metrics")
        request.add_header("Accept", PROMETHEUS_ACCEPT)
        if encoding:
            request.add_header("Accept-Encoding", encoding)
        with urllib.request.urlopen(request, timeout=10) as answer:
            body, headers = answer.read(), answer.headers
        assert headers.get("Content-Encoding") == encoding
        assert "Content-Length" not in headers
        text = (gzip.decompress(body) if encoding else body).decode()
        head = '# HELP a first\n# TYPE a gauge\na{n="1"} 1.0\na{n="3"} 3.0\n'
        assert text.startswith(head + '# HELP b second\n# TYPE b gauge\nb{n="2"} 2.0\n')
        assert text.count("\n") == 50_000 + 10
        assert text.endswith('rows_total{row="row-0049999"} 49999.0\n# EOF\n')
        with socket.create_connection(("127.0.0.1", server.server_address[1]), 5) as conn:
            conn.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
        headers_only, _, after = answer.partition(b"\r\n\r\n")
        assert headers_only.startswith(b"HTTP/1.0 200 OK\r\n") and after == b""
        assert b"Content-Length" not in headers_only
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_client_gone_mid_body_frees_its_slot_and_logs_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A scraper that reads the start of a 9 MB body and hangs up: the server's sends fail,
    its slot comes free, nothing is printed, and the next scrape is answered whole."""
    rows = many_rows(200_000)
    server, thread = metrics_server.serve("127.0.0.1", 0, lambda: [rows], ["rows_total"])
    port = server.server_address[1]
    slots = server.slots  # type: ignore[attr-defined]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            start = conn.recv(4096)
            assert start.startswith(b"HTTP/1.0 200 OK\r\n")
        # closed with the body unread: the server's next sends fail
        eventually(lambda: slots._value == metrics_server.MAX_CONNECTIONS, 20, what="its slot free")
        whole = scrape(port)
        assert whole.endswith('rows_total{row="row-0199999"} 199999.0\n')
        out, err = capfd.readouterr()
        assert (out, err) == ("", "")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_client_gone_before_the_body_is_made_stops_the_making(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A scraper that gives up (Prometheus at its timeout) while the families are still being
    built: the building stops within GONE_EVERY parts of its going, nothing is sent or
    printed, its slot comes free, and the next scrape is answered whole."""
    made = [0]
    slow = threading.Event()

    def families() -> Iterator[Family]:
        for i in range(5_000):
            if slow.is_set():
                time.sleep(0.002)
            made[0] += 1
            part = Family("rows", "one row a part", ("row",))
            part.add([str(i)], 1.0)
            yield part

    server, thread = metrics_server.serve("127.0.0.1", 0, families, ["rows"])
    port = server.server_address[1]
    slots = server.slots  # type: ignore[attr-defined]
    try:
        slow.set()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            eventually(lambda: made[0] > 0, 10, what="the building begun")
        gone_at = made[0]
        eventually(lambda: slots._value == metrics_server.MAX_CONNECTIONS, 20, what="its slot free")
        assert made[0] - gone_at <= 2 * metrics_server.GONE_EVERY, (gone_at, made[0])
        assert made[0] < 5_000
        slow.clear()
        made[0] = 0
        assert scrape(port).count("\n") == 5_000 + 2
        assert made[0] == 5_000
        assert capfd.readouterr() == ("", "")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
