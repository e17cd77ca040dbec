"""A fallback event as the body of Alertmanager's POST /api/v2/alerts."""

from __future__ import annotations

import msgspec

from placewatch.consumer.alerts.alertmanager import alertmanager_alerts
from placewatch.schemas import FallbackEvent

from tests.support.fallback_events import FIRING, LABELS, RESOLVED, T1, status


def test_a_firing_alert_carries_labels_the_reason_and_its_start() -> None:
    (firing,) = alertmanager_alerts(FIRING, None, "http://grafana/d/placewatch")
    assert firing == {
        "labels": LABELS,
        "annotations": {
            "summary": "shard llama-8b-a on gpu-07: cpu_fallback",
            "description": "placed on GPU 1 but computing on the CPU",
        },
        "startsAt": "2026-11-30T06:00:01.250000Z",
        "generatorURL": "http://grafana/d/placewatch",
    }


def test_a_resolved_alert_repeats_the_labels_of_the_alert_it_ends() -> None:
    # Alertmanager matches on the labels; the times are the firing's start and this end.
    (resolved,) = alertmanager_alerts(RESOLVED, FIRING.status)
    assert resolved == {
        "labels": LABELS,
        "annotations": {
            "summary": "shard llama-8b-a on gpu-07: gpu",
            "description": "computes on GPU 1",
        },
        "startsAt": "2026-11-30T06:00:01.250000Z",
        "endsAt": "2026-11-30T06:07:30Z",
    }


def test_a_resolved_alert_whose_firing_is_unknown_ends_every_fallback_verdict() -> None:
    unknown = alertmanager_alerts(RESOLVED, None)
    assert [a["labels"]["verdict"] for a in unknown] == ["cpu_fallback", "misplaced", "partial"]
    assert {a["startsAt"] for a in unknown} == {"2026-11-30T06:07:30Z"}
    assert {a["endsAt"] for a in unknown} == {"2026-11-30T06:07:30Z"}
    assert {a["labels"]["shard"] for a in unknown} == {"llama-8b-a"}


def test_an_empty_generator_url_is_left_out() -> None:
    (firing,) = alertmanager_alerts(FIRING, None, "")
    assert "generatorURL" not in firing


def test_the_body_is_json_as_alertmanager_takes_it() -> None:
    partial = FallbackEvent(state="firing", status=status("partial", T1, "half on the CPU"))
    body = msgspec.json.encode(alertmanager_alerts(partial, None))
    assert msgspec.json.decode(body) == [
        {
            "labels": LABELS | {"verdict": "partial"},
            "annotations": {
                "summary": "shard llama-8b-a on gpu-07: partial",
                "description": "half on the CPU",
            },
            "startsAt": "2026-11-30T06:00:01.250000Z",
        }
    ]
