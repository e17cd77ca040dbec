"""`placewatch alerts --format alertmanager` against a real Alertmanager (Debian's 0.25),
fed by a real worker: what Alertmanager holds, read back through GET /api/v2/alerts, is
what each shard does now, through a verdict change, a resolution and a SIGKILL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from placewatch.schemas import FallbackEvent

from tests.conftest import NatsServer, run_placewatch
from tests.integration.consumer.alerts.test_consume import publish
from tests.support.alertmanager import (
    Alert,
    Alertmanager,
    Relay,
    docs_config,
    firing,
)
from tests.support.alerts_cli import Alerts
from tests.support.fallback_events import status
from tests.support.fleet_node import NODE, ShardNode

ARGS = ("--format", "alertmanager", "--resend", "1")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    am = Alertmanager(tmp_path / "alertmanager", docs_config())
    am.start()
    yield am
    am.stop()


def only(verdict: str) -> Callable[[list[Alert]], bool]:
    """A check: the shard holds exactly one active alert, of `verdict`."""
    return lambda found: [a["labels"]["verdict"] for a in found] == [verdict]


def test_alertmanager_holds_what_the_shard_does_now_with_severity_and_static_labels(
    node: ShardNode, alertmanager: Alertmanager, alerts: list[Alerts]
) -> None:
    node.start()
    node.wait_published()
    alerts.append(
        Alerts(
            "--nats",
            node.url,
            *ARGS,
            "--label",
            "team=inference",
            env={
                "PLACEWATCH_ALERTS_WEBHOOK": alertmanager.alerts_url,
                "PLACEWATCH_ALERTS_ANNOTATIONS": "runbook_url=https://runbooks.example/pw",
            },
        )
    )
    (alert,) = alertmanager.wait_alerts(only("cpu_fallback"), "idle")
    assert alert["labels"] == {
        "alertname": "PlacewatchFallback",
        "node": NODE,
        "shard": "idle",
        "verdict": "cpu_fallback",
        "severity": "critical",
        "team": "inference",
    }
    assert alert["annotations"]["runbook_url"] == "https://runbooks.example/pw"
    assert "computing on the CPU" in alert["annotations"]["description"]
    assert "ldd" in alert["annotations"]["description"]
    assert alert["status"]["state"] == "active"
    assert [r["name"] for r in alert["receivers"]] == ["gpu-oncall"]  # the docs' route

    node.idle_on_gpu0()  # placed on GPU 1, computes on GPU 0: a status, no event
    (alert,) = alertmanager.wait_alerts(only("misplaced"), "idle")
    assert alert["labels"]["severity"] == "warning"
    assert "CUDA_VISIBLE_DEVICES" in alert["annotations"]["description"]
    assert alert["annotations"]["summary"] == f"shard idle on {NODE}: misplaced"
    assert [r["name"] for r in alert["receivers"]] == ["gpu-team"]
    time.sleep(2.5)  # resends post the truth now, not what fired
    assert [a["labels"]["verdict"] for a in alertmanager.alerts("idle")] == ["misplaced"]

    node.idle_on_gpu(True)
    alertmanager.wait_alerts(lambda found: found == [], "idle")
    time.sleep(2.5)
    assert alertmanager.alerts() == []
    code, _, err = alerts[-1].stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_a_gpu_tool_outage_keeps_the_alert_and_says_since_when(
    node: ShardNode, alertmanager: Alertmanager, alerts: list[Alerts]
) -> None:
    node.start()
    node.wait_published()
    env = {"PLACEWATCH_ALERTS_WEBHOOK": alertmanager.alerts_url}
    alerts.append(Alerts("--nats", node.url, *ARGS, env=env))
    (fired,) = alertmanager.wait_alerts(only("cpu_fallback"), "idle")
    assert "stale_since" not in fired["annotations"]
    node.driver_lost(True)
    (held,) = alertmanager.wait_alerts(
        lambda found: [a["annotations"].get("stale_since") is not None for a in found] == [True],
        "idle",
    )
    assert held["labels"] == fired["labels"]  # the same alert, never ended
    assert held["startsAt"] == fired["startsAt"]
    assert "stale since" in held["annotations"]["description"]
    node.driver_lost(False)
    (fresh,) = alertmanager.wait_alerts(
        lambda found: [a["annotations"].get("stale_since") for a in found] == [None], "idle"
    )
    assert (fresh["labels"], fresh["startsAt"]) == (fired["labels"], fired["startsAt"])
    assert [e.state for e in node.wait_fallback_events(1)] == ["firing"]  # nothing more
    code, _, err = alerts[-1].stop()
    assert code == 0, err


def test_a_restart_after_sigkill_with_the_resolved_event_pending_fires_nothing_again(
    node: ShardNode, alertmanager: Alertmanager, alerts: list[Alerts]
) -> None:
    relay = Relay(alertmanager.alerts_url)  # Alertmanager, down for a while when told
    try:
        node.start()
        node.wait_published()
        alerts.append(Alerts("--nats", node.url, "--webhook", relay.url, *ARGS))
        alertmanager.wait_alerts(only("cpu_fallback"), "idle")

        relay.refusing = True
        node.idle_on_gpu(True)
        node.wait_fallback_events(2)
        deadline = time.monotonic() + 20
        while not any("endsAt" in a for body in relay.refused for a in body):
            assert time.monotonic() < deadline, "the resolved alert was never tried"
            time.sleep(0.1)
        alerts[-1].kill()  # the resolved event delivered, never acknowledged
        assert [a["labels"]["verdict"] for a in alertmanager.alerts("idle")] == ["cpu_fallback"]

        relay.refusing = False
        after = len(relay.forwarded)
        alerts.append(Alerts("--nats", node.url, "--webhook", relay.url, *ARGS))
        alertmanager.wait_alerts(lambda found: found == [], "idle", timeout=15)
        time.sleep(3)  # three resends, well inside the 60 s ack wait
        assert alertmanager.alerts("idle") == []
        assert firing(relay.forwarded[after:], "idle") == []
        # One POST: the end of the alert the last run fired; nothing fires, so no resend.
        posted = [
            (a["labels"]["verdict"], "endsAt" in a) for b in relay.forwarded[after:] for a in b
        ]
        assert posted == [("cpu_fallback", True)]
        code, _, err = alerts[-1].stop()
        assert code == 0, err
    finally:
        relay.close()


def test_a_node_clock_an_hour_ahead_fires_and_resolves_without_holding_up_the_others(
    nats_server: NatsServer, alertmanager: Alertmanager, alerts: list[Alerts]
) -> None:
    # Alertmanager refuses a whole POST in which one alert starts more than its
    # resolve_timeout (5 min) from now, and holds a future endsAt as firing until then.
    now = datetime.now(UTC)
    ahead = status("cpu_fallback", now + timedelta(hours=1), "on the CPU", shard="ahead")
    on_time = status("cpu_fallback", now, "on the CPU", shard="on-time")
    publish(
        nats_server.url,
        FallbackEvent(state="firing", status=ahead),
        ahead,
        FallbackEvent(state="firing", status=on_time),
        on_time,
    )
    alerts.append(Alerts("--nats", nats_server.url, *ARGS, "--webhook", alertmanager.alerts_url))
    (fired,) = alertmanager.wait_alerts(only("cpu_fallback"), "ahead")
    assert datetime.fromisoformat(fired["startsAt"]) <= datetime.now(UTC)
    alertmanager.wait_alerts(only("cpu_fallback"), "on-time")
    back = status("gpu", now + timedelta(hours=1, minutes=1), "on GPU 1", shard="ahead")
    publish(nats_server.url, FallbackEvent(state="resolved", status=back), back)
    alertmanager.wait_alerts(lambda found: found == [], "ahead")  # not in an hour
    assert [a["labels"]["shard"] for a in alertmanager.alerts()] == ["on-time"]
    code, _, err = alerts[-1].stop()
    assert code == 0, err
    assert "not delivered" not in err, err


def test_a_node_killed_for_good_keeps_its_alert_until_forget_ends_it_for_good(
    node: ShardNode, alertmanager: Alertmanager, alerts: list[Alerts]
) -> None:
    node.start()
    node.wait_published()
    alerts.append(Alerts("--nats", node.url, "--webhook", alertmanager.alerts_url, *ARGS))
    alertmanager.wait_alerts(only("cpu_fallback"), "idle")
    assert node.worker is not None
    node.worker.kill()  # the node dies: nothing of it says the shard is no more
    node.worker = None

    # forget refuses while its lease lives (tests/integration/test_forget.py); past the
    # lease's three 1 s intervals, nothing of the node has said the shard is no more
    time.sleep(4)
    assert [a["labels"]["verdict"] for a in alertmanager.alerts("idle")] == ["cpu_fallback"]

    done = run_placewatch("forget", NODE, "--nats", node.url)
    assert done.returncode == 0, done.stderr
    assert f"  {NODE} idle: cpu_fallback: says gone, and its fallback resolved" in done.stdout
    alertmanager.wait_alerts(lambda found: found == [], "idle")

    code, _, err = alerts[-1].stop()
    assert code == 0, err
    alerts.append(Alerts("--nats", node.url, "--webhook", alertmanager.alerts_url, *ARGS))
    time.sleep(4)  # a restarted `alerts` reads the bucket, and four resends pass
    assert alertmanager.alerts() == []
    code, _, err = alerts[-1].stop()
    assert code == 0, err

    node.start()  # a worker under the name again: it takes the lease and publishes afresh
    node.wait_published()
