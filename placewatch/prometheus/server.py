"""The HTTP server /metrics is served from: a WSGI app writing the families in the format the
scraper asks for (exposition.py; OpenMetrics where its Accept header names it, gzip at a cheap
level where it accepts it), on a server whose threads, idle connections and backlog are
bounded.

prometheus_client's own server starts a thread for every connection and keeps it for as long
as the client keeps the connection open, idle or not, with the listen backlog of
socketserver's default (5): 369 idle connections held 371 threads. Here a connection that sends
nothing for IDLE_S is closed, at most MAX_CONNECTIONS are served at once (one past that is
closed at once, and Prometheus scrapes again at its next interval), and the backlog is
BACKLOG.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .exposition import OPENMETRICS, TEXT, Family, render

MAX_CONNECTIONS = 128
IDLE_S = 10.0
BACKLOG = 128
GZIP_LEVEL = 1
"""A scrape's bytes compress to a tenth at level 1 in a fifth of level 9's time."""

Families = Callable[[], Iterable[Family]]


def metrics_app(families: Families) -> Callable[..., list[bytes]]:
    """A WSGI app answering every GET with the families, in the format the scraper asks for."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        openmetrics = "application/openmetrics-text" in environ.get("HTTP_ACCEPT", "")
        body = render(families(), openmetrics=openmetrics)
        headers = [("Content-Type", OPENMETRICS if openmetrics else TEXT)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return app


class _Handler(WSGIRequestHandler):
    timeout = IDLE_S  # socketserver sets it on the connection: an idle client is let go

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing per request: a scrape every 15 s is no news."""


class BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread a connection, at most MAX_CONNECTIONS at once."""

    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # every slot busy: closed, not queued
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve(host: str, port: int, families: Families) -> tuple[WSGIServer, threading.Thread]:
    """/metrics of `families()` on host:port, served from a thread of its own."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("Server", (BoundedServer,), {"address_family": family})
    server: WSGIServer = make_server(host, port, metrics_app(families), server_class, _Handler)
    thread = threading.Thread(target=server.serve_forever, name="placewatch-metrics", daemon=True)
    thread.start()
    return server, thread
