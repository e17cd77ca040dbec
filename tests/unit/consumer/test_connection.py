"""What a connection says about itself: URLs without credentials, one line per change."""

from __future__ import annotations

import logging

import anyio
import nats.errors
import pytest

from placewatch.connection import Bus, ConnectionLog, redact, refusal

from tests.conftest import free_port

LOGGER = "placewatch.connection"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://n1:s3cret@10.0.0.5:4222", "nats://***@10.0.0.5:4222"),
        ("tls://token-abc@nats.example:4443", "tls://***@nats.example:4443"),
        ("nats://10.0.0.5:4222", "nats://10.0.0.5:4222"),
        ("nats://user:p%40ss@host:4222", "nats://***@host:4222"),
    ],
)
def test_redact_removes_user_and_password(url: str, shown: str) -> None:
    assert redact(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "http://ops:pw@127.0.0.1:8080/health?token=abc&x=1",
            "http://***@127.0.0.1:8080/health?token=***&x=1",
        ),
        ("https://h/a?x=1&access_token=abc#top", "https://h/a?x=1&access_token=***#top"),
        ("https://h/?key=k&password=p&sig=s", "https://h/?key=***&password=***&sig=***"),
        ("https://h/?api_key=k;session_id=s", "https://h/?api_key=***;session_id=***"),
        (
            "https://b.s3.example/o?X-Amz-Credential=c&X-Amz-Signature=s&page=2",
            "https://b.s3.example/o?X-Amz-Credential=***&X-Amz-Signature=***&page=2",
        ),
        ("https://h/cb#access_token=abc&state=1", "https://h/cb#access_token=***&state=1"),
        ("https://h/?page=2&sort=name", "https://h/?page=2&sort=name"),
    ],
)
def test_redact_removes_the_values_of_query_parameters_that_hold_secrets(
    url: str, shown: str
) -> None:
    assert redact(url) == shown


def test_redact_takes_secrets_out_of_a_line_and_leaves_the_rest() -> None:
    line = "GET 'http://u:p@h/?token=t' failed; a // b c@d; http://h/?sig=s next"
    assert (
        redact(line) == "GET 'http://***@h/?token=***' failed; a // b c@d; http://h/?sig=*** next"
    )


def test_a_bus_defaults_to_the_local_server_and_prefix() -> None:
    bus = Bus()
    assert (bus.servers, bus.options, bus.prefix) == (["nats://127.0.0.1:4222"], {}, "placewatch")


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_failed_attempts_are_one_line_until_reconnected(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    # Loopback ports where nothing listens: a timeout makes the log look at what answers.
    first, second = free_port(), free_port()
    events = ConnectionLog([f"nats://n1:pw@127.0.0.1:{first}", f"nats://127.0.0.1:{second}"])

    async def main() -> None:
        for _ in range(3):
            await events.error(ConnectionRefusedError("Connect call failed"))
        await events.reconnected()
        await events.error(TimeoutError())

    anyio.run(main, backend="asyncio")
    assert said(caplog) == [
        (
            logging.WARNING,
            f"cannot reach NATS at nats://***@127.0.0.1:{first}, nats://127.0.0.1:{second} "
            "(Connect call failed); retrying every half second",
        ),
        (logging.INFO, "reconnected to NATS"),
        (
            logging.WARNING,
            f"cannot reach NATS at nats://***@127.0.0.1:{first}, nats://127.0.0.1:{second} "
            "(TimeoutError); retrying every half second",
        ),
    ]


def test_a_refused_permission_is_said_once_per_subject(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    events = ConnectionLog(["nats://127.0.0.1:4222"])
    refusal = 'nats: permissions violation for publish to "placewatch.telemetry.n2"'
    other = 'nats: permissions violation for subscription to "placewatch.>"'

    async def main() -> None:
        for message in (refusal, refusal, other, refusal):
            await events.error(Exception(message))

    anyio.run(main, backend="asyncio")
    hint = (
        "; these credentials do not allow it "
        "(the permissions each process needs are in docs/operations.md)"
    )
    assert said(caplog) == [
        (logging.ERROR, f"NATS refused it: {refusal.removeprefix('nats: ')}{hint}"),
        (logging.ERROR, f"NATS refused it: {other.removeprefix('nats: ')}{hint}"),
    ]
    assert not events.failing  # a refusal is not an outage


def test_a_disconnection_is_said(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    anyio.run(ConnectionLog(["nats://127.0.0.1:4222"]).disconnected, backend="asyncio")
    assert said(caplog) == [
        (logging.WARNING, "disconnected from NATS; telemetry is dropped until it returns")
    ]


# As nats-py 2.16 hands them over: the server's -ERR text, lower-cased, behind "nats: ".
REFUSED_PUBLISH = nats.errors.Error(
    'nats: permissions violation for publish to "placewatch.telemetry.n2"'
)
REFUSED_SUBSCRIPTION = nats.errors.Error(
    'nats: permissions violation for subscription to "placewatch.>"'
)


def test_a_permissions_violation_is_a_refusal_in_the_servers_words() -> None:
    assert (
        refusal(REFUSED_PUBLISH) == 'permissions violation for publish to "placewatch.telemetry.n2"'
    )
    assert refusal(nats.errors.Error("Permissions Violation for Publish to x ")) == (
        "Permissions Violation for Publish to x"
    )


def test_other_errors_are_no_refusal() -> None:
    assert refusal(nats.errors.Error("nats: maximum payload exceeded")) is None
    assert refusal(nats.errors.AuthorizationError()) is None
    assert refusal(nats.errors.NoRespondersError()) is None
    assert refusal(ConnectionRefusedError(111, "Connection refused")) is None
