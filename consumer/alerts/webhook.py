"""The webhook's HTTP POST: the standard library's, run in a thread by the caller.

One alert at a time needs no HTTP client dependency.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlparse

from placewatch import __version__


class DeliveryError(Exception):
    """The webhook did not take it: what came back, or why nothing did."""


def check_url(url: str) -> str | None:
    """Why `url` cannot be a webhook, or None when it can."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return f"--webhook {url!r}: give an http:// or https:// URL"
    return None


def post_json(url: str, body: bytes, timeout: float) -> None:
    """POST `body` as JSON; returns on a 2xx, raises DeliveryError otherwise."""
    request = urllib.request.Request(  # noqa: S310 - check_url allows http and https only
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": f"placewatch-alerts/{__version__}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - as above
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DeliveryError(str(reason)) from None
    if not 200 <= status < 300:
        raise DeliveryError(f"HTTP {status}")
