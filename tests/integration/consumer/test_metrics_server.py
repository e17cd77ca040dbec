"""The exporter's HTTP server: idle connections let go, at most so many served at once, the
rest closed at once, a scrape answered all the while; real sockets on loopback."""

from __future__ import annotations

import gzip
import socket
import threading
import urllib.request

import pytest

from placewatch.prometheus import server as metrics_server
from placewatch.prometheus.exposition import Family

from tests.support.eventually import eventually

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


def test_idle_connections_are_let_go_and_no_more_are_served_than_it_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_server, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(metrics_server._Handler, "timeout", 0.5)
    seen = Family("scrapes_seen_total", "a series to serve", (), "counter", [("", 1.0)])
    server, thread = metrics_server.serve("127.0.0.1", 0, lambda: [seen])
    port = server.server_address[1]
    idle: list[socket.socket] = []
    try:
        assert server.request_queue_size == metrics_server.BACKLOG == 128
        before = threading.active_count()
        for _ in range(12):  # connect, send nothing
            conn = socket.create_connection(("127.0.0.1", port))
            conn.settimeout(0.05)
            idle.append(conn)
        # Four are served (a thread each, waiting for a request), the other eight closed.
        eventually(lambda: sum(closed(c) for c in idle[4:]) == 8, 5)
        assert threading.active_count() - before <= 4
        assert not any(closed(c) for c in idle[:4])
        # The four are let go once idle for the handler's timeout; a scrape is served then.
        eventually(lambda: all(closed(c) for c in idle[:4]), 5)
        assert "scrapes_seen_total 1.0" in scrape(port)
        eventually(lambda: threading.active_count() <= before, 5)
    finally:
        for conn in idle:
            conn.close()
        server.shutdown()
        server.server_close()
        thread.join()


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
