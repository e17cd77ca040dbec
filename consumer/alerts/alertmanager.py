"""Alerts as the body of Alertmanager's POST /api/v2/alerts, and the labels they carry.

Checked against Alertmanager 0.25 (Debian's prometheus-alertmanager): it identifies an
alert by its whole label set, takes `endsAt` in the past as resolved, and refuses (400)
a label or annotation name outside `[a-zA-Z_][a-zA-Z0-9_]*`. It also refuses, with "start
time must be before end time", the whole POST when one alert starts after the end it gives
a firing alert (now plus its resolve_timeout, 5 minutes), and holds an alert whose `endsAt`
is in the future as firing until then. The times come from the shard's node, whose clock
may be ahead: so no time posted is later than this process's now. Without that, one node
more than 5 minutes ahead had every POST refused, every other alert with it, until
Alertmanager let the fleet's alerts expire.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from placewatch.schemas.printable import printable_values

from .blindness import NODE_BLIND, SHARD_BLIND, Blind
from .reconcile import Alert

ALERTNAME = "PlacewatchFallback"
IDENTITY = ("alertname", "node", "shard", "verdict")
"""The labels every alert carries from the shard itself; no static label may replace one."""
OWN_ANNOTATIONS = ("summary", "description", "stale_since")
"""What the shard does now, and since when its verdict has stood without evidence (a stale
status: the alert goes on, its labels as they were); no static annotation may replace one."""
SEVERITY = {"cpu_fallback": "critical", "misplaced": "warning", "partial": "warning"}
"""The `severity` label per verdict, unless a static label gives one for every alert: on
the CPU a shard serves at a tenth of its speed (critical); misplaced or partial, it
computes on GPUs, not all of them the ones it was given (warning)."""
DEFAULT_SEVERITY = "warning"
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def name_problem(name: str) -> str | None:
    """Why Alertmanager would refuse `name` as a label or annotation name, or None."""
    if not _NAME.fullmatch(name):
        return "a name is letters, digits and _, not starting with a digit"
    if name.startswith("__"):
        return "names starting with __ are reserved to Prometheus and Alertmanager"
    return None


@dataclass(frozen=True)
class AlertTemplate:
    """What every alert carries besides the shard's own: static labels and annotations
    (`--label`, `--annotation`) and the generator URL."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    generator_url: str | None = None

    def labels_for(self, node: str, shard: str, verdict: str) -> dict[str, str]:
        """The alert's identity: static labels, severity, then the shard's own."""
        return {
            "severity": SEVERITY.get(verdict, DEFAULT_SEVERITY),
            **self.labels,
            "alertname": ALERTNAME,
            "node": node,
            "shard": shard,
            "verdict": verdict,
        }

    def body(self, alert: Alert, now: datetime | None = None) -> dict[str, Any]:
        """One alert of the list POST /api/v2/alerts takes; no time in it later than `now`
        (this process's clock); each label and annotation printable (schemas/printable.py:
        Alertmanager passes ESC and bidirectional marks on to every receiver)."""
        now = now or datetime.now(UTC)
        starts = min(alert.starts, now)
        s = alert.status
        summary = f"shard {s.shard} on {s.node}: {s.verdict}"
        if alert.ends is not None and s.verdict != alert.verdict:
            summary += f" (no longer {alert.verdict})"
        annotations = {**self.annotations, "summary": summary, "description": s.reason}
        if s.stale and s.stale_since is not None:
            annotations["stale_since"] = rfc3339(s.stale_since)
        body: dict[str, Any] = {
            "labels": self.labels_for(s.node, s.shard, alert.verdict),
            "annotations": annotations,
            "startsAt": rfc3339(starts),
        }
        if alert.ends is not None:
            body["endsAt"] = rfc3339(max(min(alert.ends, now), starts))
        if self.generator_url:
            body["generatorURL"] = self.generator_url
        printed: dict[str, Any] = printable_values(body)
        return printed

    def bodies(self, alerts: list[Alert]) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        return [self.body(a, now) for a in alerts]

    def blind_body(self, b: Blind, now: datetime) -> dict[str, Any]:
        """A blindness alert (blindness.py), severity warning unless a static label says;
        printable as `body` is (what the node's tools said comes from the node)."""
        starts = min(datetime.fromtimestamp(b.since, UTC), now)
        since = rfc3339(starts)
        labels = {"severity": DEFAULT_SEVERITY, **self.labels, "node": b.node}
        if b.shard is None:
            labels["alertname"] = NODE_BLIND
            summary = f"no GPU tool of {b.node} has answered since {since}"
            description = (
                f"None of its GPU tools answers ({b.lost}). Its GPUs' health is held as last "
                "read and its shards' verdicts stand stale: nothing new is known of them. Run "
                "`placewatch doctor` on the node; a driver reload or upgrade under a running "
                "worker, or a tool stuck in the driver, does this."
            )
        else:
            labels |= {"alertname": SHARD_BLIND, "shard": b.shard}
            summary = f"shard {b.shard} on {b.node}: no evidence since {since}"
            description = f"{b.lost}; run `placewatch doctor` on the node"
        body: dict[str, Any] = {
            "labels": labels,
            "annotations": {**self.annotations, "summary": summary, "description": description},
            "startsAt": since,
        }
        if b.ends is not None:
            body["endsAt"] = rfc3339(max(min(datetime.fromtimestamp(b.ends, UTC), now), starts))
        if self.generator_url:
            body["generatorURL"] = self.generator_url
        printed: dict[str, Any] = printable_values(body)
        return printed


def rfc3339(when: datetime) -> str:
    """As the contract writes times: RFC 3339, UTC as `Z`."""
    return msgspec.json.encode(when).decode().strip('"')
