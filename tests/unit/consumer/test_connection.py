"""What the shared NATS connection makes of the errors nats-py hands its error callback."""

from __future__ import annotations

import logging

import anyio
import nats.errors
import pytest

from placewatch.consumer.connection import ConnectionLog, refusal

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


def test_the_connection_log_says_each_refusal_once(caplog: pytest.LogCaptureFixture) -> None:
    events = ConnectionLog(["nats://n2:secret@127.0.0.1:4222"])

    async def errors() -> None:
        for exc in (REFUSED_PUBLISH, REFUSED_PUBLISH, REFUSED_SUBSCRIPTION):
            await events.error(exc)

    with caplog.at_level(logging.ERROR, logger="placewatch.consumer.connection"):
        anyio.run(errors)
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        'NATS refused it: permissions violation for publish to "placewatch.telemetry.n2"',
        'NATS refused it: permissions violation for subscription to "placewatch.>"',
    ]
    assert not events.failing  # a refusal keeps the connection: not an outage
