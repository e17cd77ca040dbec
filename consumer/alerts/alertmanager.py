"""A fallback event as the body of Alertmanager's POST /api/v2/alerts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from placewatch.schemas import FALLBACK_VERDICTS, ComputeStatus, FallbackEvent

ALERTNAME = "PlacewatchFallback"


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
    return [
        _alert(s, verdict, s.time, s.time, generator_url) for verdict in sorted(FALLBACK_VERDICTS)
    ]


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
