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
