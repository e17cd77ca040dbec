"""The webhook's HTTP POST: the standard library's, run in a thread by the caller.

One alert at a time needs no HTTP client dependency. No redirect is
followed: urllib turns a POST redirected with 301, 302 or 303 into a GET
without the body, and a 2xx to that would count as delivered. The URL is
shown only through `redact`: its query may hold a token, its user a password.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from urllib.parse import urlparse

from placewatch import __version__
from placewatch.connection import redact
from placewatch.http_opener import opener


class DeliveryError(Exception):
    """The webhook did not take it: what came back, or why nothing did."""


def check_url(url: str) -> str | None:
    """Why `url` cannot be a webhook, or None when it can."""
    parsed = urlparse(url)
    try:
        parsed.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return f"--webhook {redact(url)!r}: its port is not a number from 0 to 65535"
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"--webhook {redact(url)!r}: give an http:// or https:// URL"
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
        with opener(proxies=True).open(request, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        moved = " (a redirect, not followed: give the URL it points to)" if exc.code < 400 else ""
        raise DeliveryError(f"HTTP {exc.code} {exc.reason}{moved}{_said(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DeliveryError(redact(str(reason))) from None
    except http.client.HTTPException as exc:  # an answer that is not HTTP; not an OSError
        raise DeliveryError(f"not an HTTP answer ({type(exc).__name__})") from None
    if not 200 <= status < 300:
        raise DeliveryError(f"HTTP {status}")


SAID_CHARS = 200
"""How much of a refusal's body the error quotes (Alertmanager says why in a line)."""


def _said(exc: urllib.error.HTTPError) -> str:
    """What a 4xx answer said, quoted, printable, in a line."""
    if not 400 <= exc.code < 500:
        return ""
    try:
        text = exc.read(SAID_CHARS).decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return ""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return f": {redact(text)}" if text else ""
