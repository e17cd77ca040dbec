"""Which URLs a webhook may be."""

from __future__ import annotations

import pytest

from placewatch.consumer.alerts.webhook import check_url


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9093/api/v2/alerts", "https://hooks.example/placewatch"]
)
def test_http_and_https_urls_are_webhooks(url: str) -> None:
    assert check_url(url) is None


@pytest.mark.parametrize(
    "url", ["ftp://hooks.example/x", "hooks.example/x", "http://", "file:///tmp/x"]
)
def test_anything_else_is_refused_with_what_to_give(url: str) -> None:
    assert check_url(url) == f"--webhook {url!r}: give an http:// or https:// URL"


def test_a_refused_url_is_shown_without_its_secrets() -> None:
    assert check_url("ftp://ops:s3cret@hooks.example/x?token=s3cret") == (
        "--webhook 'ftp://***@hooks.example/x?token=***': give an http:// or https:// URL"
    )
    assert check_url("https://hooks.example:44x/x?sig=s3cret") == (
        "--webhook 'https://hooks.example:44x/x?sig=***': its port is not a number from 0 to 65535"
    )
