"""The exporter's HTTP server: idle connections let go, at most so many served at once, the
rest closed at once, a scrape answered all the while; real sockets on loopback."""

from __future__ import annotations

import socket
import threading
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from placewatch.consumer.exporter import metrics_server

from tests.support.eventually import eventually


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
    registry = CollectorRegistry()
    Counter("scrapes_seen", "a series to serve", registry=registry).inc()
    server, thread = metrics_server.serve("127.0.0.1", 0, registry)
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
