"""The publish path: messages a second through the schemas encoder and the worker's Publisher.

Against nats-py publishing the same pre-encoded bytes, in one run, into a
nats-server this script starts, on a connection made as the worker makes
its own (placewatch.worker.bus.connect). A child process counts arrivals on a bare
socket (bench/counter.py), so the publisher is what is measured. Each round
publishes the messages, flushes, and waits for the counter to have them
all; the rate is messages over the time from the first publish to the end
of the flush, the best of the rounds. A third row, the pre-encoded bytes
with the contract's headers, tells the encoder's share from the headers'.
A last line times the encoder alone and gives the most any publisher could
reach with it: raw's time per message against raw's plus the encoder's.

What a node pays is not that rate but one publish an interval, after an
idle interval, with the caches cold: the last rows take the CPU of one
publish after `--idle` seconds asleep (median of `--cold-rounds`), the
worker's path against nats-py publishing the same bytes pre-encoded and
against encoding and publishing the whole sample, as schema 1 sent it, and
against the floor: the same HPUB frame, as nats-py builds it, sent by one
`send` on a bare non-blocking socket (what any publisher in Python pays),
and the encoder alone, cold, with no publish. A row of nats-py publishing the bytes
with no headers tells what building the contract's header block costs it, cold.

The message is a NodeTelemetry of 8 GPUs, 64 processes and 16 shards, in
JSON, or in MessagePack with `--encoding msgpack` (the worker's `--encoding`):
then all three rows send the MessagePack bytes.

    python bench/publish_path.py [--messages N] [--rounds R] [--encoding E]
                                 [--cold-rounds N] [--idle S]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.lowlevel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.counter import handshake  # noqa: E402
from bench.servers import nats_server  # noqa: E402
from bench.synthetic import node_sample, node_telemetry  # noqa: E402
from placewatch.connection import connect  # noqa: E402
from placewatch.schemas import NodeTelemetry, encode, subjects  # noqa: E402
from placewatch.schemas.codec import Encoding  # noqa: E402
from placewatch.worker.bus.publish import Publisher  # noqa: E402

TARGET = 0.8
COLD_TARGET_MS = 0.15
YIELDS = 5


class Counter:
    """bench/counter.py as a child process."""

    def __init__(self, url: str, subject: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "counter.py"), url, subject],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.stdout, self.stdin = self.proc.stdout, self.proc.stdin
        assert self.stdout.readline().strip() == "ready"
        self.total = 0

    def wait_for(self, more: int) -> tuple[int, float]:
        """Until `more` further messages arrived: the total and the last arrival's time."""
        self.total += more
        self.stdin.write(f"{self.total}\n")
        self.stdin.flush()
        count, last = self.stdout.readline().split()
        return int(count), float(last)

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(10)


async def rounds(
    url: str, message: NodeTelemetry, messages: int, n_rounds: int, encoding: Encoding
) -> dict[str, list[float]]:
    nc = await connect([url], "bench publisher")
    subject = subjects.telemetry(message.node)
    payload, headers = encode(message, encoding)
    publisher = Publisher(nc, subjects.DEFAULT_PREFIX, encoding)

    async def raw() -> None:
        await nc.publish(subject, payload)

    async def raw_headers() -> None:
        await nc.publish(subject, payload, headers=headers)

    async def placewatch() -> None:
        await publisher.telemetry(message)

    paths: dict[str, Callable[[], Awaitable[None]]] = {
        "nats-py, pre-encoded bytes": raw,
        "nats-py, bytes + headers": raw_headers,
        "encoder + Publisher": placewatch,
    }
    rates: dict[str, list[float]] = {name: [] for name in paths}
    counter = Counter(url, subject)
    try:
        for _ in range(n_rounds):
            for name, publish in paths.items():
                started = time.monotonic()
                for _ in range(messages):
                    await publish()
                await nc.flush()
                flushed = time.monotonic()
                count, _ = await anyio.to_thread.run_sync(counter.wait_for, messages)
                assert count == counter.total, f"{counter.total - count} messages lost"
                rates[name].append(messages / (flushed - started))
    finally:
        counter.close()
        await nc.close()
    print(f"message: NodeTelemetry, {len(payload)} bytes of {encoding}, headers {headers}")
    return rates


async def cold(
    url: str, message: NodeTelemetry, encoding: Encoding, n_rounds: int, idle_s: float
) -> dict[str, list[float]]:
    """The CPU of one publish after an idle interval, as a node pays it once an interval:
    each path in turn, after `idle_s` seconds asleep, from the call to the bytes written
    (the connection's flusher runs within the YIELDS turns of the event loop measured after
    the call)."""
    nc = await connect([url], "bench cold publisher")
    subject = subjects.telemetry(message.node)
    payload, headers = encode(message, encoding)
    whole = node_sample()
    publisher = Publisher(nc, subjects.DEFAULT_PREFIX, encoding)

    async def raw() -> None:
        await nc.publish(subject, payload, headers=headers)

    async def no_headers() -> None:
        await nc.publish(subject, payload)

    async def placewatch() -> None:
        await publisher.telemetry(message)

    async def schema_1() -> None:
        whole_payload, whole_headers = encode(whole, encoding)
        await nc.publish(subject, whole_payload, headers=whole_headers)

    async def nothing() -> None:
        pass

    bare = bare_socket(url)
    frame = hpub(subject, payload, headers)

    async def floor() -> None:
        sent = bare.send(frame)
        assert sent == len(frame), f"the bare socket took {sent} of {len(frame)} bytes"

    async def encoder() -> None:
        encode(message, encoding)

    paths: dict[str, Callable[[], Awaitable[None]]] = {
        "nothing (the measuring alone)": nothing,
        "the HPUB frame, one send on a bare socket": floor,
        "the schemas encoder alone, no publish": encoder,
        "nats-py, the bytes + headers, pre-encoded": raw,
        "nats-py, the bytes alone (no header block)": no_headers,
        "encoder + Publisher (schema 2)": placewatch,
        "encoder + publish of the whole sample (schema 1)": schema_1,
    }
    took: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for _ in range(n_rounds):
            for name, publish in paths.items():
                await anyio.sleep(idle_s)
                started = time.process_time()
                await publish()
                for _ in range(YIELDS):
                    await anyio.lowlevel.checkpoint()  # the connection's flusher writes the bytes
                took[name].append(time.process_time() - started)
        pong(bare)
    finally:
        bare.close()
        await nc.close()
    return took


def bare_socket(url: str) -> socket.socket:
    """A plain TCP connection to the server at `url`, past CONNECT and a PING, non-blocking."""
    sock = handshake(url, timeout=5.0)
    pong(sock)
    sock.setblocking(False)
    return sock


def pong(sock: socket.socket) -> None:
    """PING the server on `sock` and wait for its PONG: everything sent before it was taken."""
    sock.settimeout(5.0)
    sock.sendall(b"PING\r\n")
    answer = b""
    while b"PONG\r\n" not in answer:  # the server's own PINGs may come first
        answer += sock.recv(4096)
    assert b"-ERR" not in answer, f"the server refused what the bare socket sent: {answer!r}"


def hpub(subject: str, payload: bytes, headers: dict[str, str]) -> bytes:
    """The HPUB frame nats-py writes for `payload` with `headers`."""
    block = b"NATS/1.0\r\n"
    block += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
    head = f"HPUB {subject} {len(block)} {len(block) + len(payload)}\r\n".encode()
    return head + block + payload + b"\r\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--encoding", choices=["json", "msgpack"], default="json")
    parser.add_argument(
        "--cold-rounds", type=int, default=15, help="cold publishes of each path (15)"
    )
    parser.add_argument(
        "--idle", type=float, default=2.0, help="seconds asleep before each cold publish (2)"
    )
    args = parser.parse_args()
    message = node_telemetry()
    with nats_server(jetstream=False) as url:
        rates = anyio.run(
            rounds, url, message, args.messages, args.rounds, args.encoding, backend="asyncio"
        )
    raw = max(rates["nats-py, pre-encoded bytes"])
    print(
        f"publish path: {args.messages} messages x {args.rounds} rounds, all arrived, "
        f"best round (load {os.getloadavg()[0]:.2f})"
    )
    print(f"{'path':<30}{'msgs/s':>10}{'MB/s':>8}{'us/msg':>8}{'of raw':>8}")
    size = len(encode(message, args.encoding)[0])
    for name, found in rates.items():
        best = max(found)
        print(
            f"{name:<30}{best:>10.0f}{best * size / 1e6:>8.1f}{1e6 / best:>8.1f}{best / raw:>8.2f}"
        )
    encoding_us = encode_time(message, args.encoding) * 1e6
    raw_us = 1e6 / raw
    print(
        f"the schemas encoder alone: {encoding_us:.1f} us a message; with the headers and the "
        f"Publisher free, the most the path could reach is {raw_us / (raw_us + encoding_us):.2f} "
        "of raw"
    )
    print(
        f"target (the first one, kept for comparison): encoder + Publisher at least {TARGET} of raw"
    )

    with nats_server(jetstream=False) as url:
        took = anyio.run(
            cold, url, message, args.encoding, args.cold_rounds, args.idle, backend="asyncio"
        )
    print(
        f"cold publish: one message after {args.idle:g} s idle, CPU from the call to the bytes "
        f"written, median of {args.cold_rounds} (load {os.getloadavg()[0]:.2f})"
    )
    alone = statistics.median(took["nothing (the measuring alone)"])
    print(f"{'path':<52}{'ms':>8}{'less the measuring':>20}")
    for name, found in took.items():
        median = statistics.median(found)
        print(f"{name:<52}{median * 1e3:>8.3f}{(median - alone) * 1e3:>20.3f}")
    ours = (statistics.median(took["encoder + Publisher (schema 2)"]) - alone) * 1e3
    floor = (statistics.median(took["the HPUB frame, one send on a bare socket"]) - alone) * 1e3
    encoder = (statistics.median(took["the schemas encoder alone, no publish"]) - alone) * 1e3
    print(
        f"target: a cold publish at most {COLD_TARGET_MS} ms of CPU: {ours:.3f} ms "
        f"({ours / COLD_TARGET_MS:.2f} of it); the floor, the bare socket's send and the "
        f"encoder alone, {floor:.3f} + {encoder:.3f} ms ({(floor + encoder) / COLD_TARGET_MS:.2f} "
        "of it)"
    )


def encode_time(
    message: NodeTelemetry, encoding: Encoding, count: int = 2000, repeats: int = 5
) -> float:
    """Seconds the schemas encoder takes for `message`, the best of `repeats` runs."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(count):
            encode(message, encoding)
        best = min(best, (time.perf_counter() - started) / count)
    return best


if __name__ == "__main__":
    main()
