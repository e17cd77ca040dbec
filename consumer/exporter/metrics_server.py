"""The HTTP server /metrics is served from: prometheus_client's WSGI app, on a server whose
threads, idle connections and backlog are bounded.

prometheus_client's own server starts a thread for every connection and keeps it for as long
as the client keeps the connection open, idle or not, with the listen backlog of
socketserver's default (5): 369 idle connections held 371 threads. Here a connection that sends
nothing for IDLE_S is closed, at most MAX_CONNECTIONS are served at once (one past that is
closed at once, and Prometheus scrapes again at its next interval), and the backlog is
BACKLOG.
"""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

MAX_CONNECTIONS = 128
IDLE_S = 10.0
BACKLOG = 128


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


def serve(host: str, port: int, registry: CollectorRegistry) -> tuple[WSGIServer, threading.Thread]:
    """/metrics of `registry` on host:port, served from a thread of its own."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("Server", (BoundedServer,), {"address_family": family})
    server: WSGIServer = make_server(host, port, make_wsgi_app(registry), server_class, _Handler)
    thread = threading.Thread(target=server.serve_forever, name="placewatch-metrics", daemon=True)
    thread.start()
    return server, thread
