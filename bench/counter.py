"""A subscriber that only counts arrivals, for the bus benchmarks; run as a child process.

    python bench/counter.py URL SUBJECT

It speaks the NATS text protocol over a bare socket, so that counting costs
a few microseconds a message and the publisher, not the counter, is what a
benchmark measures. It prints `ready`, then reads target totals from stdin,
one a line; once that many messages have arrived in all it prints the total
and the monotonic time of the last arrival (CLOCK_MONOTONIC, the same clock
as its parent's time.monotonic()).
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import time
from urllib.parse import urlparse

CONNECT = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1}


def handshake(url: str, timeout: float = 10.0) -> socket.socket:
    """A bare socket to the server at `url`, past the server's INFO line and this CONNECT."""
    parsed = urlparse(url)
    sock = socket.create_connection((parsed.hostname, parsed.port or 4222), timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    info = bytearray()
    while b"\r\n" not in info:
        info += sock.recv(65536)
    sock.sendall(b"CONNECT " + json.dumps(CONNECT).encode() + b"\r\n")
    return sock


def main() -> None:
    url, subject = sys.argv[1], sys.argv[2]
    sock = handshake(url)
    sock.sendall(f"SUB {subject} 1\r\nPING\r\n".encode())
    buf = bytearray()
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "nats")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    count, target, last, ready = 0, -1, 0.0, False
    pos = 0
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                line = os.read(sys.stdin.fileno(), 1024)
                if not line:
                    return
                target = int(line.split()[-1])
                continue
            try:
                chunk = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                return
            buf += chunk
            while True:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                head = bytes(buf[pos:end])
                if head.startswith((b"MSG ", b"HMSG ")):
                    size = int(head.rsplit(b" ", 1)[1])
                    if len(buf) < end + 2 + size + 2:
                        break
                    pos = end + 2 + size + 2
                    count += 1
                    last = time.monotonic()
                    continue
                pos = end + 2
                if head == b"PING":
                    sock.sendall(b"PONG\r\n")
                elif head == b"PONG" and not ready:
                    ready = True
                    print("ready", flush=True)
                elif head.startswith(b"-ERR"):
                    print(head.decode(errors="replace"), file=sys.stderr, flush=True)
            if pos > 1 << 20:
                del buf[:pos]
                pos = 0
        if 0 <= target <= count:
            print(f"{count} {last:.6f}", flush=True)
            target = -1


if __name__ == "__main__":
    main()
