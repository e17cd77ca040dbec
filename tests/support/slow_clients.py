"""A slow-loris flood as a child process: `python -m tests.support.slow_clients HOST PORT N`
holds N connections to an HTTP server, each sending its request head a byte at a time and
never finishing it, and opens a new one for each the server closes, as fast as
RECONNECTS_PER_S allows.

It says `holding N` on stderr once all N have connected, and on SIGTERM how many it opened
again (`reconnected M`), then exits. Exit 3, with the reason, when the limit on open files
cannot be raised to N. `flooding()` runs it for a test.
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import ROOT
from tests.support.child import LoggedChild
from tests.support.eventually import eventually

DRIP_S = 0.5
"""A byte of head this often: a per-read timeout alone never closes such a connection."""
START = b"GET /metrics HTTP/1.1\r\nHost: flood\r\nX-Slow: "
RECONNECTS_PER_S = 2000
"""Twenty times 1,000 connections opened again every 10 s, the flood that kept Prometheus
out, and short of taking a whole core from the tests that run beside it."""


def raise_open_files(needed: int) -> str | None:
    """Why this process cannot hold `needed` descriptors, or None once it can."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return None
    if hard != resource.RLIM_INFINITY and hard < needed:
        return f"RLIMIT_NOFILE's hard limit is {hard}, under the {needed} this flood needs"
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return None


class Flood:
    def __init__(self, host: str, port: int, count: int) -> None:
        self.where = (host, port)
        self.count = count
        self.selector = selectors.DefaultSelector()
        self.started: set[socket.socket] = set()
        """Connected, its head begun."""
        self.connected = 0
        self.reconnected = 0
        self.to_open = 0
        """Closed by the server, not opened again yet."""

    def open(self) -> None:
        conn = socket.socket(socket.AF_INET6 if ":" in self.where[0] else socket.AF_INET)
        conn.setblocking(False)
        conn.connect_ex(self.where)
        self.selector.register(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)

    def closed(self, conn: socket.socket) -> None:
        self.selector.unregister(conn)
        self.started.discard(conn)
        conn.close()
        self.to_open += 1

    def reopen(self, most: int) -> int:
        """Open again up to `most` of those the server closed; how many it opened."""
        count = min(most, self.to_open)
        for _ in range(count):
            self.open()
        self.to_open -= count
        self.reconnected += count
        return count

    def step(self, timeout: float) -> None:
        for key, events in self.selector.select(timeout):
            conn: socket.socket = key.fileobj  # type: ignore[assignment]
            try:
                if events & selectors.EVENT_READ:
                    if not conn.recv(4096):
                        self.closed(conn)
                elif conn not in self.started:
                    conn.send(START)
                    self.started.add(conn)
                    self.connected += 1
                    self.selector.modify(conn, selectors.EVENT_READ)
            except OSError:
                self.closed(conn)

    def drip(self) -> None:
        for conn in list(self.started):
            try:
                conn.send(b"x")
            except BlockingIOError:
                pass
            except OSError:
                self.closed(conn)


def main(host: str, port: int, count: int) -> int:
    problem = raise_open_files(count + 64)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 3
    flood = Flood(host, port, count)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    for _ in range(count):
        flood.open()
    said = False
    next_drip = time.monotonic() + DRIP_S
    allowance, last = 0.0, time.monotonic()
    while not stopping:
        wait = min(DRIP_S, max(next_drip - time.monotonic(), 0))
        flood.step(0.005 if flood.to_open else wait)
        now = time.monotonic()
        allowance = min(allowance + (now - last) * RECONNECTS_PER_S, RECONNECTS_PER_S / 20)
        last = now
        allowance -= flood.reopen(int(allowance))
        if not said and flood.connected >= count:
            print(f"holding {count}", file=sys.stderr, flush=True)
            said = True
        if time.monotonic() >= next_drip:
            flood.drip()
            next_drip = time.monotonic() + DRIP_S
    print(f"reconnected {flood.reconnected}", file=sys.stderr, flush=True)
    return 0


@contextmanager
def flooding(host: str, port: int, count: int) -> Iterator[Flooding]:
    """The flood running, all `count` connected once; a loud skip when the limit on open
    files cannot hold them."""
    child = LoggedChild(
        [sys.executable, "-m", "tests.support.slow_clients", host, str(port), str(count)],
        {**os.environ, "PYTHONPATH": str(ROOT)},
        "slow-clients",
    )
    try:
        eventually(
            lambda: "holding" in child.err() or child.proc.poll() is not None,
            30,
            what=f"{count} slow connections to {host}:{port}",
        )
        if child.proc.poll() == 3:
            pytest.skip(f"SKIPPED, NOT TESTED: {child.err().strip()}")
        assert f"holding {count}" in child.err(), child.err()
        yield Flooding(child)
    finally:
        child.close()


class Flooding:
    def __init__(self, child: LoggedChild) -> None:
        self.child = child

    def stop(self) -> int:
        """How many connections it opened again, each for one the server closed."""
        self.child.proc.terminate()
        self.child.proc.wait(10)
        said = [ln for ln in self.child.err().splitlines() if ln.startswith("reconnected ")]
        assert said, self.child.err()
        return int(said[-1].split()[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
