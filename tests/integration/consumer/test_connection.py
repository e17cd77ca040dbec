"""The connection every placewatch process makes, against real servers: connected, lost,
back, each said once; and the first connection within a limit or why not."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from placewatch.connection import Unreachable, connect, connect_within

from tests.conftest import NatsServer, free_port
from tests.support.eventually import eventually_async

LOGGER = "placewatch.connection"


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_an_outage_is_one_line_each_way(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def main() -> None:
        nc = await connect([nats_server.url], "test")
        try:
            await anyio.to_thread.run_sync(nats_server.stop)
            await eventually_async(lambda: not nc.is_connected)
            await anyio.sleep(1.5)  # three attempts to reconnect fail meanwhile
            await anyio.to_thread.run_sync(nats_server.start)
            await eventually_async(lambda: nc.is_connected)
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")
    connected, *outage, back = said(caplog)
    assert connected == f"connected to NATS at {nats_server.url}"
    # The lost connection is an error and a disconnection to nats-py, in either order.
    (lost,) = [line for line in outage if line.startswith("cannot reach")]
    assert lost.startswith(f"cannot reach NATS at {nats_server.url} (")
    assert lost.endswith("); retrying every half second")
    assert sorted(outage) == sorted(
        [lost, "disconnected from NATS; telemetry is dropped until it returns"]
    )
    assert back == "reconnected to NATS"  # and nothing for its own close


def test_connect_within_says_nothing_answers_where_no_server_listens() -> None:
    url = f"nats://127.0.0.1:{free_port()}"

    async def main() -> None:
        await connect_within([url], "test", {}, 1)

    with pytest.raises(Unreachable) as caught:
        anyio.run(main, backend="asyncio")
    assert str(caught.value) == (
        f"cannot reach NATS at {url} within 1 s: nothing answers there; "
        "check --nats (or PLACEWATCH_NATS) and that a server runs"
    )


def test_connect_within_blames_the_credentials_where_a_server_answers(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", config="authorization { user: n1, password: right }\n")
    server.start()
    url = server.url.replace("nats://", "nats://n1:wrong@")

    async def main() -> None:
        await connect_within([url], "test", {}, 1.5)

    try:
        with pytest.raises(Unreachable) as caught:
            anyio.run(main, backend="asyncio")
    finally:
        server.stop()
    assert str(caught.value) == (
        f"cannot reach NATS at nats://***@127.0.0.1:{server.port} within 1.5 s: a server "
        "answers but the connection failed; check the credentials and TLS flags"
    )
    assert "wrong" not in str(caught.value)


@contextlib.contextmanager
def not_nats(greeting: bytes) -> Iterator[str]:
    """A TCP server on a free loopback port that is no NATS server: it sends `greeting` (an
    SSH server's) or nothing (an HTTP server waits for its request) to each connection."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed
            held.append(conn)
            if greeting:
                conn.sendall(greeting)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"nats://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(5)
        for conn in held:
            conn.close()


NOT_NATS = (
    "what answers there is no NATS server ({}, where a NATS server greets with INFO); check "
    "the port in --nats (or PLACEWATCH_NATS): clients connect to 4222 unless the server says "
    "otherwise, its monitoring port (8222) is HTTP"
)


def test_connect_within_says_a_silent_service_is_no_nats_server() -> None:
    async def main(url: str) -> None:
        await connect_within([url], "test", {}, 1)

    with not_nats(b"") as url, pytest.raises(Unreachable) as caught:
        anyio.run(main, url, backend="asyncio")
    assert str(caught.value) == (
        f"cannot reach NATS at {url} within 1 s: " + NOT_NATS.format("it sent nothing within 1 s")
    )


def test_a_service_that_greets_otherwise_is_said_to_be_no_nats_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def main(url: str) -> None:
        with anyio.move_on_after(1.5):
            await connect([url], "test")

    with not_nats(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n") as url:
        anyio.run(main, url, backend="asyncio")
    assert said(caplog) == [
        f"cannot reach NATS at {url} (nats: empty response from server when expecting INFO "
        "message: "
        + NOT_NATS.format("it sent b'SSH-2.0-OpenSSH_9.2p1 De'")
        + "); retrying every half second"
    ]


def test_connect_within_gives_the_connection_with_the_options(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", config="authorization { token: s3cret }\n")
    server.start()

    async def main() -> bool:
        nc = await connect_within([server.url], "test", {"token": "s3cret"}, 5)
        try:
            await nc.flush()
            return nc.is_connected
        finally:
            await nc.close()

    try:
        assert anyio.run(main, backend="asyncio") is True
    finally:
        server.stop()


def test_a_server_given_without_a_scheme_is_looked_for_on_its_port() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # answers TCP, never speaks NATS
        port = listener.getsockname()[1]

        async def main() -> None:
            await connect_within([f"127.0.0.1:{port}"], "test", {}, 1)

        with pytest.raises(Unreachable) as caught:
            anyio.run(main, backend="asyncio")
    # Looked for on its port, where something answers, though not as a NATS server.
    assert "no NATS server (it sent nothing within 1 s" in str(caught.value)
