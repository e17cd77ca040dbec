"""A real HTTP server on 127.0.0.1 that records every request: a webhook, a health URL; and
`raw_server`, a TCP server that answers any bytes (a redirect, what is not HTTP).

It answers `status` (500 to the first `failures` POSTs, as a webhook that is down for a
while) with the body `answer`, each answer `delay` seconds after the request was recorded.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    """What it was answered."""

    def json(self) -> Any:
        return json.loads(self.body)


class Endpoint:
    def __init__(
        self, status: int = 200, failures: int = 0, delay: float = 0.0, answer: bytes = b""
    ) -> None:
        self.status = status
        self.failures = failures
        self.requests: list[Request] = []
        lock = threading.Lock()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with lock:
                    posts = sum(r.method == "POST" for r in endpoint.requests)
                    failing = self.command == "POST" and posts < endpoint.failures
                    code = 500 if failing else endpoint.status
                    endpoint.requests.append(
                        Request(self.command, self.path, dict(self.headers), body, code)
                    )
                time.sleep(delay)
                self.send_response(code)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def posts(self) -> list[tuple[int, Any]]:
        """(status answered, JSON body) of every POST."""
        return [(r.status, r.json()) for r in self.requests if r.method == "POST"]

    def delivered(self) -> list[Any]:
        """The JSON bodies of the POSTs answered 2xx."""
        return [body for code, body in self.posts if 200 <= code < 300]

    def wait(self, count: int, timeout: float = 15) -> list[Any]:
        """At least `count` delivered bodies; fails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while len(self.delivered()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        found = self.delivered()
        assert len(found) >= count, f"{len(found)} delivered, not {count}: {self.posts}"
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def raw_server(answer: bytes) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that answers every connection with `answer`: its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
