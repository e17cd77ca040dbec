"""fan_in.py's simulated nodes: publisher processes on bare sockets, each node at 1 Hz.

Each node first publishes its NodeInventory, then each second its NodeTelemetry (8 GPUs, 64
processes, 16 shards: 3.7 KB of JSON, the worker's headers), encoded once as a template
with seq and time patched in; node j publishes at j/N into each second, so the load is
spread evenly. The message time is stamped when the publisher sends it. A publisher past
its time sends what is due at once and catches up if it can; it counts what it sent inside
the step's measured window, which is what the step offered.
"""

from __future__ import annotations

import json
import select
import socket
import time
from datetime import UTC, datetime
from urllib.parse import urlparse

INTERVAL_S = 1.0
"""Each node's telemetry interval: a publisher's cycle is one second."""
SLOT_S = 0.01


def node_name(j: int) -> str:
    return f"node-{j:05d}"


def hpub(subject: bytes, headers: bytes, payload: bytes) -> bytes:
    return b"HPUB %s %d %d\r\n%s%s\r\n" % (
        subject,
        len(headers),
        len(headers) + len(payload),
        headers,
        payload,
    )


def header_block(headers: dict[str, str]) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def session_of(nodes: int) -> str:
    """The session a step's nodes publish in: each step's own, as a restarted worker's. A
    FleetView takes a node's telemetry of the session it holds only past the seq it holds,
    so nodes of an earlier step in the same session, their last telemetry kept in the
    stream, would not be told of again until their seq passed it."""
    return f"fan-in-{nodes}"


class Template:
    """A node's encoded NodeTelemetry, split where seq and time go, and its NodeInventory."""

    def __init__(self, session: str) -> None:
        import msgspec

        from bench.synthetic import node_messages
        from placewatch.schemas import encode

        inventory, telemetry = node_messages(node="@NODE@")
        telemetry = msgspec.structs.replace(telemetry, session=session)
        payload, headers = encode(inventory)
        self.inventory_parts = payload.split(b"@NODE@")
        self.inventory_headers = header_block(headers)
        payload, headers = encode(telemetry)
        self.headers = header_block(headers)
        self.before_node, rest = payload.split(b"@NODE@")
        between, rest = rest.split(b'"seq":0,"time":"', 1)
        self.between = between + b'"seq":'
        self.after = b'"' + rest.split(b'"', 1)[1]

    def message(self, node: bytes, subject: bytes, seq: int, stamp: bytes) -> bytes:
        payload = b"".join(
            (self.before_node, node, self.between, b"%d" % seq, b',"time":"', stamp, self.after)
        )
        return hpub(subject, self.headers, payload)

    def inventory(self, node: bytes) -> bytes:
        return hpub(
            b"placewatch.inventory." + node, self.inventory_headers, node.join(self.inventory_parts)
        )


def connect_raw(url: str) -> socket.socket:
    parsed = urlparse(url)
    sock = socket.create_connection((parsed.hostname, parsed.port or 4222), 10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    data = b""
    while b"\r\n" not in data:
        data += sock.recv(65536)
    connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1}
    sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
    data = b""
    while b"PONG" not in data:
        data += sock.recv(65536)
    return sock


def publish(
    url: str,
    *,
    nodes: int,
    index: int,
    count: int,
    start: float,
    seconds: float,
    window: tuple[float, float],
) -> None:
    """Send this publisher's nodes every second from `start` for `seconds` seconds; print
    what it sent, what it sent inside `window`, and how late it ever was."""
    template = Template(session_of(nodes))
    mine = list(range(index, nodes, count))  # node j sends at j/nodes into each second
    names = [node_name(j).encode() for j in mine]
    subjects = [b"placewatch.telemetry." + n for n in names]
    offsets = [j / nodes for j in mine]
    sock = connect_raw(url)
    sock.sendall(b"".join(template.inventory(n) for n in names))
    sent, in_window, late = 0, 0, 0.0
    cycle = 0
    while cycle < seconds:
        at = 0
        while at < len(mine):
            now = time.time()
            due_until = now - (start + cycle)
            batch = []
            stamp = None
            while at < len(mine) and offsets[at] <= due_until:
                if stamp is None:
                    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                late = max(late, due_until - offsets[at])
                batch.append(template.message(names[at], subjects[at], cycle, stamp.encode()))
                at += 1
            if batch:
                sock.sendall(b"".join(batch))
                sent += len(batch)
                if window[0] <= now < window[1]:
                    in_window += len(batch)
            if select.select([sock], [], [], 0)[0] and b"PING" in sock.recv(65536):
                sock.sendall(b"PONG\r\n")
            if at < len(mine):
                next_due = start + cycle + offsets[at]
                time.sleep(max(0.0, min(next_due - time.time(), SLOT_S)))
        cycle += 1
        time.sleep(max(0.0, start + cycle - time.time()))
    sock.close()
    print(json.dumps({"sent": sent, "in_window": in_window, "late_max_s": late}), flush=True)
