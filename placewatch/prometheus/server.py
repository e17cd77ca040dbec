"""The HTTP server /metrics is served from: a WSGI app writing the families in the format the
scraper asks for (exposition.py; OpenMetrics where its Accept header names it, gzip at a cheap
level where it accepts it), on a server whose threads, connections, request heads and backlog
are bounded. A node's body is written whole, with its length; a fleet's (`streamed`) is
written in pieces as exposition.stream makes them, the answer ending with its connection,
and no longer made once its client is gone.

prometheus_client's own server starts a thread for every connection and keeps it for as long
as the client keeps the connection open, idle or not, with the listen backlog of
socketserver's default (5): 369 idle connections held 371 threads. Here one thread accepts
every connection and reads every request head, without blocking on any; a request whose
head came whole is answered in a thread of its own, one answer a connection (HTTP/1.0). At
most MAX_CONNECTIONS are held at once, waiting for their heads or being answered; a
connection has HEAD_S to send its whole head (at most HEAD_BYTES) and is closed otherwise,
and a send that makes no progress for IDLE_S ends an answer.

A per-read timeout alone lets connections that send their heads slowly, or never, hold every
slot: 300 of them keep a scrape out until they time out, and a client that reconnects every
10 s keeps Prometheus out for good. So a connection that comes when every slot is taken
evicts the oldest connection still waiting for its head; one whose head arrived is never
evicted, and a head that arrived with the connect is read as the connection is accepted.
Prometheus sends its head with its connect, so its scrapes are answered while 1,000 slow
connections reconnect as fast as they are closed
(tests/integration/consumer/test_metrics_server.py). Reading heads in one thread keeps that
cheap: a thread started for each of them was what a flood cost when every connection had
one. The backlog holds such a flood whole: a connection the kernel finds no room for is
dropped and tried again a second later.
"""

from __future__ import annotations

import gzip
import io
import select
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .exposition import GZIP_LEVEL, OPENMETRICS, TEXT, Family, render, stream

MAX_CONNECTIONS = 128
HEAD_S = 2.0
"""Time to send the whole request head: Prometheus sends it with its connect."""
HEAD_BYTES = 16384
"""The longest request head read; Prometheus's is under 300 bytes."""
IDLE_S = 10.0
"""A send that makes no progress for this long ends the answer (a client that stopped
reading)."""
ACCEPT_BURST = 64
"""Connections accepted before the heads already read are looked at again."""
ACCEPT_PAUSE_S = 0.1
"""The pause after an accept that failed (the process out of descriptors)."""
BACKLOG = 1024
"""Connections the kernel queues before they are accepted (Linux caps it at
net.core.somaxconn, 4096 since 5.4)."""
GONE_EVERY = 64
"""Parts of a streamed body made between two looks at whether its client is still there."""
CONNECTION = "placewatch.connection"
"""The environ key of the request's connection."""

Families = Callable[[], Iterable[Family]]


def metrics_app(
    families: Families, streamed: Sequence[str] | None = None
) -> Callable[..., Iterable[bytes]]:
    """A WSGI app answering every GET with the families, in the format the scraper asks for,
    and every HEAD with the headers alone (with the length of the body a GET would get, where
    it is written whole). `streamed`: the order of the families, which come in parts
    (exposition.stream); the body is then written as it is made, without a length."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        openmetrics = "application/openmetrics-text" in environ.get("HTTP_ACCEPT", "")
        compressed = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
        headers = [("Content-Type", OPENMETRICS if openmetrics else TEXT)]
        if compressed:
            headers.append(("Content-Encoding", "gzip"))
        head = environ.get("REQUEST_METHOD") == "HEAD"
        if streamed is not None:
            start_response("200 OK", headers)
            parts = _while_there(families(), environ.get(CONNECTION))
            if head:  # no length (wsgiref would say 0 of an empty list): the headers alone
                return iter((b"",))
            return stream(parts, streamed, openmetrics=openmetrics, gzip=compressed)
        body = render(families(), openmetrics=openmetrics)
        if compressed:
            body = gzip.compress(body, GZIP_LEVEL)
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [] if head else [body]

    return app


def _while_there(parts: Iterable[Family], conn: socket.socket | None) -> Iterator[Family]:
    """The parts, until the client is found gone (looked at every GONE_EVERY parts): then
    ConnectionAbortedError, which ends the answer unsent and unlogged (wsgiref's handler
    takes it as a client gone), so that a scrape Prometheus gave up on (its timeout) costs
    no more and cannot pile up on the next."""
    for i, part in enumerate(parts):
        if conn is not None and i % GONE_EVERY == 0 and _gone(conn):
            raise ConnectionAbortedError("the client hung up before the body was made")
        yield part


def _gone(conn: socket.socket) -> bool:
    """Whether the client closed its end: a peek that reads the end of the stream (a client
    that sent more than its head is there still)."""
    poll = select.poll()
    poll.register(conn, select.POLLIN)
    if not poll.poll(0):  # nothing to read, no end: there (a recv would wait, timeout set)
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class _Handler(WSGIRequestHandler):
    timeout = IDLE_S  # set on the connection before answering: each send's limit

    def setup(self) -> None:
        """The request comes as the connection and the head the server read from it."""
        self.request, head = self.request
        super().setup()
        self.rfile.close()
        self.rfile = io.BytesIO(head)

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        environ[CONNECTION] = self.connection
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing per request: a scrape every 15 s is no news."""


class _Waiting:
    """A connection whose head has not come whole yet."""

    __slots__ = ("address", "data", "deadline")

    def __init__(self, address: Any, data: bytes, deadline: float) -> None:
        self.address = address
        self.data = data
        self.deadline = deadline


def head_end(data: bytes) -> bool:
    """Whether `data` holds a request head's blank line (http.client takes a bare LF too)."""
    return b"\n\r\n" in data or b"\n\n" in data


class BoundedServer(WSGIServer):
    """One thread reads every request head, a thread answers each request whose head came
    whole; at most MAX_CONNECTIONS held at once, waiting or answering."""

    request_queue_size = BACKLOG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.waiting: dict[socket.socket, _Waiting] = {}
        """Held by the serving thread alone, oldest first."""
        self.selector = selectors.DefaultSelector()  # before binding: a failed bind closes it
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.stopped.set()
        super().__init__(*args, **kwargs)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept, read heads, hand each whole one to a thread, close the late, until
        shutdown()."""
        self.stopped.clear()
        self.socket.setblocking(False)
        self.selector.register(self.socket, selectors.EVENT_READ)
        try:
            while not self.stopping.is_set():
                first = next(iter(self.waiting.values()), None)
                left = poll_interval if first is None else first.deadline - time.monotonic()
                for key, _ in self.selector.select(min(max(left, 0.0), poll_interval)):
                    if key.fileobj is self.socket:
                        self._accept()
                    else:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._close_late()
        finally:
            for conn in list(self.waiting):
                self._drop(conn)
            self.selector.unregister(self.socket)
            self.stopped.set()

    def shutdown(self) -> None:
        self.stopping.set()
        self.stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        self.selector.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-answer is no news; anything else is printed, as socketserver
        does."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                conn, address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError:  # out of descriptors: the queue waits, the process goes on
                self.stopping.wait(ACCEPT_PAUSE_S)
                return
            if not self.slots.acquire(blocking=False):
                if not self.waiting:  # every one held is being answered
                    conn.close()
                    continue
                self._drop(next(iter(self.waiting)))  # the oldest waiting for its head
                self.slots.acquire(blocking=False)
            conn.setblocking(False)
            self.waiting[conn] = _Waiting(address, b"", time.monotonic() + HEAD_S)
            self.selector.register(conn, selectors.EVENT_READ)
            self._read(conn)  # a head that came with the connect is answered at once

    def _read(self, conn: socket.socket) -> None:
        held = self.waiting.get(conn)
        if held is None:  # evicted by an accept earlier in the same round
            return
        try:
            chunk = conn.recv(HEAD_BYTES - len(held.data))
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        held.data += chunk
        if head_end(held.data):
            self._answer(conn)
        elif not chunk or len(held.data) >= HEAD_BYTES:
            self._drop(conn)

    def _close_late(self) -> None:
        now = time.monotonic()
        while self.waiting:
            conn, held = next(iter(self.waiting.items()))
            if held.deadline > now:
                return
            self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        self.selector.unregister(conn)
        del self.waiting[conn]
        conn.close()
        self.slots.release()

    def _answer(self, conn: socket.socket) -> None:
        self.selector.unregister(conn)
        held = self.waiting.pop(conn)
        conn.setblocking(True)
        thread = threading.Thread(
            target=self._answer_in_thread, args=(conn, held.address, held.data), daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: closed, as a full server closes
            conn.close()
            self.slots.release()

    def _answer_in_thread(self, conn: socket.socket, address: Any, head: bytes) -> None:
        try:
            self.finish_request((conn, head), address)  # type: ignore[arg-type]
        except Exception:
            self.handle_error(conn, address)
        finally:
            self.shutdown_request(conn)
            self.slots.release()


def serve(
    host: str, port: int, families: Families, streamed: Sequence[str] | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """/metrics of `families()` on host:port, served from a thread of its own (`streamed`:
    metrics_app's)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("Server", (BoundedServer,), {"address_family": family})
    app = metrics_app(families, streamed)
    server: WSGIServer = make_server(host, port, app, server_class, _Handler)
    thread = threading.Thread(target=server.serve_forever, name="placewatch-metrics", daemon=True)
    thread.start()
    return server, thread
