"""Fallback events as HTTP requests: a plain JSON body, or Alertmanager's v2 alerts.

The POST itself is the standard library's, run in a thread by the caller: one
alert at a time needs no HTTP client dependency.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import msgspec

from placewatch.schemas import ComputeStatus, FallbackEvent

from . import __version__

ALERTNAME = "PlacewatchFallback"
FALLBACK_VERDICTS = ("partial", "cpu_fallback", "misplaced")


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


def alertmanager_alerts(
    event: FallbackEvent, fired: ComputeStatus | None, generator_url: str | None = None
) -> list[dict[str, Any]]:
    """The body Alertmanager's POST /api/v2/alerts takes for one event.

    Alertmanager tells alerts apart by their labels, so a resolved alert must
    carry the verdict its firing alert had (`fired`), not the verdict the shard
    left it for. When that is not known (the firing event is no longer in the
    stream), one resolved alert per fallback verdict ends whichever fired; one
    that never fired notifies nobody.
    """
    s = event.status
    if event.state == "firing":
        return [_alert(s, s.verdict, s.time, None, generator_url)]
    if fired is not None:
        return [_alert(s, fired.verdict, fired.time, s.time, generator_url)]
    return [_alert(s, verdict, s.time, s.time, generator_url) for verdict in FALLBACK_VERDICTS]


def _alert(
    s: ComputeStatus,
    verdict: str,
    starts: datetime,
    ends: datetime | None,
    generator_url: str | None,
) -> dict[str, Any]:
    alert: dict[str, Any] = {
        "labels": {"alertname": ALERTNAME, "node": s.node, "shard": s.shard, "verdict": verdict},
        "annotations": {
            "summary": f"shard {s.shard} on {s.node}: {s.verdict}",
            "description": s.reason,
        },
        "startsAt": _rfc3339(starts),
    }
    if ends is not None:
        alert["endsAt"] = _rfc3339(ends)
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


def _rfc3339(when: datetime) -> str:
    """As the contract writes times: RFC 3339, UTC as `Z`."""
    return msgspec.json.encode(when).decode().strip('"')
