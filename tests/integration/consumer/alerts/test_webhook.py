"""The webhook's POST against a real local HTTP server: what it sends, and what a failed
delivery says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from placewatch import __version__
from placewatch.consumer.alerts.webhook import DeliveryError, post_json

from tests.conftest import free_port
from tests.support.http_endpoint import Endpoint, raw_server


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    yield server
    server.close()


def test_a_2xx_is_delivered_with_the_body_as_json(endpoint: Endpoint) -> None:
    post_json(endpoint.url, b'{"state": "firing"}', timeout=5)
    (request,) = endpoint.requests
    assert (request.method, request.path, request.body) == ("POST", "/hook", b'{"state": "firing"}')
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == f"placewatch-alerts/{__version__}"


def test_any_2xx_is_delivered() -> None:
    accepted = Endpoint(status=202)
    try:
        post_json(accepted.url, b"[]", timeout=5)
        assert [r.status for r in accepted.requests] == [202]
    finally:
        accepted.close()


def test_an_error_status_is_not_delivered_and_says_which() -> None:
    failing = Endpoint(status=503)
    try:
        with pytest.raises(DeliveryError) as caught:
            post_json(failing.url, b"{}", timeout=5)
    finally:
        failing.close()
    assert str(caught.value) == "HTTP 503 Service Unavailable"


def test_a_refusal_says_what_the_receiver_said_in_one_printable_line() -> None:
    refusing = Endpoint(status=400, answer=b'"start time must be before end time"\n\x1b[2J' * 9)
    try:
        with pytest.raises(DeliveryError) as caught:
            post_json(refusing.url, b"[]", timeout=5)
    finally:
        refusing.close()
    said = str(caught.value)
    assert said.startswith('HTTP 400 Bad Request: "start time must be before end time" [2J"start')
    assert said.isprintable() and len(said) < 240  # 200 characters of the answer at most


def test_nothing_listening_says_the_connection_was_refused() -> None:
    with pytest.raises(DeliveryError) as caught:
        post_json(f"http://127.0.0.1:{free_port()}/hook", b"{}", timeout=5)
    assert str(caught.value) == "[Errno 111] Connection refused"


def test_an_answer_slower_than_the_timeout_is_not_delivered() -> None:
    slow = Endpoint(delay=2.0)
    try:
        with pytest.raises(DeliveryError) as caught:
            post_json(slow.url, b"{}", timeout=0.3)
    finally:
        slow.close()
    assert str(caught.value) == "timed out"


def test_a_redirect_is_not_followed_and_not_delivered() -> None:
    # urllib would follow a 302 to a POST with a GET without the body: a 2xx to that GET
    # would count as delivered.
    target = Endpoint()
    moved = f"HTTP/1.1 302 Found\r\nLocation: {target.url}\r\nContent-Length: 0\r\n\r\n"
    try:
        with raw_server(moved.encode()) as base, pytest.raises(DeliveryError) as caught:
            post_json(f"{base}/hook", b"{}", timeout=5)
        assert target.requests == []
    finally:
        target.close()
    assert str(caught.value) == (
        "HTTP 302 Found (a redirect, not followed: give the URL it points to)"
    )


def test_an_answer_that_is_not_http_is_not_delivered_and_says_so() -> None:
    with raw_server(b"garbage\r\n\r\n") as base, pytest.raises(DeliveryError) as caught:
        post_json(f"{base}/hook", b"{}", timeout=5)
    assert str(caught.value) == "not an HTTP answer (BadStatusLine)"
