"""The connection every placewatch process makes, against real servers: connected, lost,
back, each said once; and the first connection within a limit or why not."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import anyio
import pytest

from placewatch.consumer.connection import Unreachable, connect, connect_within

from tests.conftest import NatsServer, free_port, until

LOGGER = "placewatch.consumer.connection"


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
            await until(lambda: not nc.is_connected)
            await anyio.sleep(1.5)  # three attempts to reconnect fail meanwhile
            await anyio.to_thread.run_sync(nats_server.start)
            await until(lambda: nc.is_connected)
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
    assert "a server answers but the connection failed" in str(caught.value)
