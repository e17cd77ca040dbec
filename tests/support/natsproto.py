"""A bare NATS subscriber speaking the text protocol over a socket.

No placewatch code and no NATS client library: what `nats sub` sees is what
these tests see, headers and payload bytes as they travel.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass
class Message:
    subject: str
    headers: dict[str, str]
    payload: bytes

    def json(self) -> object:
        return json.loads(self.payload)


class RawSubscriber:
    def __init__(
        self,
        url: str,
        subject: str,
        timeout: float = 5.0,
        connect_extra: dict[str, str] | None = None,
    ) -> None:
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port or 4222), timeout)
        self.buf = b""
        info = self._line()
        assert info.startswith(b"INFO "), info
        connect: dict[str, object] = {
            "verbose": False,
            "pedantic": False,
            "headers": True,
            "protocol": 1,
        }
        connect |= connect_extra or {}
        self.sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
        self.sock.sendall(f"SUB {subject} 1\r\nPING\r\n".encode())
        while self._line() != b"PONG":
            pass

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def next(self, timeout: float) -> Message:
        """The next message within `timeout` seconds, else TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no message")
            self.sock.settimeout(remaining)
            try:
                line = self._line()
            except TimeoutError:
                raise TimeoutError("no message") from None
            op, _, rest = line.partition(b" ")
            if op == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif op == b"MSG":
                parts = rest.split()
                return Message(parts[0].decode(), {}, self._exact(int(parts[-1])))
            elif op == b"HMSG":
                parts = rest.split()
                header_len, total = int(parts[-2]), int(parts[-1])
                raw = self._exact(total)
                return Message(parts[0].decode(), _headers(raw[:header_len]), raw[header_len:])


def _headers(block: bytes) -> dict[str, str]:
    lines = block.decode().split("\r\n")
    assert lines[0].startswith("NATS/1.0"), lines[0]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            headers[key.strip()] = value.strip()
    return headers
