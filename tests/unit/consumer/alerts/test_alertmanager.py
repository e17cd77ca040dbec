"""Alerts as the body of Alertmanager's POST /api/v2/alerts: labels with a severity per
verdict and static ones, annotations that say what the shard does now."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from placewatch.consumer.alerts.alertmanager import AlertTemplate, name_problem
from placewatch.consumer.alerts.reconcile import Alert

from tests.support.fallback_events import FIRING, LABELS, MOVED, RESOLVED, T1, T2, T_MOVED

TEMPLATE = AlertTemplate(
    {"team": "inference"}, {"runbook_url": "https://runbooks.example/pw"}, "http://grafana/d/pw"
)


def test_a_firing_alert_carries_labels_the_reason_and_its_start() -> None:
    body = TEMPLATE.body(Alert(FIRING.status, "cpu_fallback", T1))
    assert body == {
        "labels": LABELS | {"team": "inference"},
        "annotations": {
            "runbook_url": "https://runbooks.example/pw",
            "summary": "shard llama-8b-a on gpu-07: cpu_fallback",
            "description": "placed on GPU 1 but computing on the CPU",
        },
        "startsAt": "2026-11-30T06:00:01.250000Z",
        "generatorURL": "http://grafana/d/pw",
    }


@pytest.mark.parametrize(
    ("verdict", "severity"),
    [("cpu_fallback", "critical"), ("misplaced", "warning"), ("partial", "warning")],
)
def test_severity_follows_the_verdict(verdict: str, severity: str) -> None:
    assert AlertTemplate().labels_for("gpu-07", "a", verdict)["severity"] == severity


def test_a_static_severity_replaces_the_one_per_verdict_and_no_label_replaces_the_shards() -> None:
    template = AlertTemplate({"severity": "page", "node": "elsewhere", "team": "x"})
    assert template.labels_for("gpu-07", "a", "misplaced") == {
        "severity": "page",
        "team": "x",
        "alertname": "PlacewatchFallback",
        "node": "gpu-07",
        "shard": "a",
        "verdict": "misplaced",
    }


def test_the_alert_a_verdict_change_ends_keeps_its_labels_and_says_what_is_true_now() -> None:
    body = AlertTemplate().body(Alert(MOVED, "cpu_fallback", T1, T_MOVED))
    assert body["labels"] == LABELS  # Alertmanager finds the alert to end by them
    assert body["annotations"] == {
        "summary": "shard llama-8b-a on gpu-07: misplaced (no longer cpu_fallback)",
        "description": "placed on GPU 1 but holds 9 GiB on GPU 0",
    }
    assert (body["startsAt"], body["endsAt"]) == (
        "2026-11-30T06:00:01.250000Z",
        "2026-11-30T06:03:00Z",
    )


def test_a_resolved_alert_says_the_shard_computes_on_its_gpus_again() -> None:
    body = AlertTemplate().body(Alert(RESOLVED.status, "cpu_fallback", T1, T2))
    assert (
        body["annotations"]["summary"] == "shard llama-8b-a on gpu-07: gpu (no longer cpu_fallback)"
    )
    assert body["annotations"]["description"] == "computes on GPU 1"


def test_an_empty_generator_url_is_left_out() -> None:
    body = AlertTemplate(generator_url="").body(Alert(FIRING.status, "cpu_fallback", T1))
    assert "generatorURL" not in body


def test_the_body_is_json_as_alertmanager_takes_it() -> None:
    alerts = [Alert(MOVED, "cpu_fallback", T1, T_MOVED), Alert(MOVED, "misplaced", T_MOVED)]
    decoded = msgspec.json.decode(msgspec.json.encode(AlertTemplate().bodies(alerts)))
    assert [(a["labels"]["verdict"], a["labels"]["severity"], "endsAt" in a) for a in decoded] == [
        ("cpu_fallback", "critical", True),
        ("misplaced", "warning", False),
    ]


@pytest.mark.parametrize("name", ["team", "runbook_url", "_x", "Env2"])
def test_alertmanager_label_names(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("2fa", "letters, digits and _"),
        ("team-a", "letters, digits and _"),
        ("", "letters, digits and _"),
        ("__name__", "reserved"),
    ],
)
def test_names_alertmanager_refuses(name: str, why: str) -> None:
    problem = name_problem(name)
    assert problem is not None and why in problem


def test_no_time_posted_is_later_than_now_whatever_the_node_s_clock_says() -> None:
    # Alertmanager refuses a POST whose alert starts past now + resolve_timeout, and holds
    # an alert whose endsAt is in the future as firing until then.
    now = T1 - timedelta(hours=1)  # the node's clock is an hour ahead of this one
    firing = AlertTemplate().body(Alert(FIRING.status, "cpu_fallback", T1), now)
    assert firing["startsAt"] == "2026-11-30T05:00:01.250000Z"
    ended = AlertTemplate().body(Alert(RESOLVED.status, "cpu_fallback", T1, T2), now)
    assert (ended["startsAt"], ended["endsAt"]) == (
        "2026-11-30T05:00:01.250000Z",
        "2026-11-30T05:00:01.250000Z",
    )
    # Ended in the past but started "later" by a clock stepped back: it cannot end first.
    stepped = AlertTemplate().body(Alert(RESOLVED.status, "cpu_fallback", T2, T1), T2)
    assert (stepped["startsAt"], stepped["endsAt"]) == (
        "2026-11-30T06:07:30Z",
        "2026-11-30T06:07:30Z",
    )


def test_a_stale_status_keeps_the_alert_and_says_since_when_in_an_annotation() -> None:
    stale = msgspec.structs.replace(
        FIRING.status, stale=True, stale_since=T1 + timedelta(seconds=30)
    )
    body = AlertTemplate().body(Alert(stale, "cpu_fallback", T1))
    assert body["labels"] == LABELS  # the same alert: nothing ends, nothing fires anew
    assert "endsAt" not in body
    assert body["annotations"]["stale_since"] == "2026-11-30T06:00:31.250000Z"
    fresh = AlertTemplate().body(Alert(FIRING.status, "cpu_fallback", T1))
    assert "stale_since" not in fresh["annotations"]
