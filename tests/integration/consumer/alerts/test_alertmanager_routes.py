"""The Alertmanager configuration docs/consumers.md ships, on a real Alertmanager (Debian's
0.25) and its amtool: routes by severity, one notification per cause across the fleet, and
a node's own alert (down, gone, or every GPU tool down) inhibiting its shards' alerts."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.alertmanager import AMTOOL, Alertmanager, docs_config, need
from tests.support.eventually import eventually
from tests.support.http_endpoint import Endpoint

PAGER = "https://pager.example/hooks/placewatch"
TEAM = "https://chat.example/hooks/gpu-team"
ROLLOUT = [f"gpu-{i:02}" for i in range(1, 7)]
"""The nodes a driver rollout left with no GPU tool answering."""


def alert(name: str, severity: str, node: str, **labels: str) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return {
        "labels": {"alertname": name, "severity": severity, "node": node, **labels},
        "annotations": {"summary": f"{name} on {node}"},
        "startsAt": now,
    }


@pytest.fixture
def receivers() -> Iterator[tuple[Endpoint, Endpoint]]:
    """The pager's and the team's webhooks."""
    pager, team = Endpoint(), Endpoint()
    yield pager, team
    pager.close()
    team.close()


def test_amtool_checks_the_docs_config_and_routes_each_alert_by_severity(tmp_path: Path) -> None:
    amtool = need(AMTOOL)
    config = tmp_path / "alertmanager.yml"
    config.write_text(docs_config())
    checked = subprocess.run(
        [str(amtool), "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert " - 2 inhibit rules" in checked.stdout

    def receiver(*labels: str) -> str:
        done = subprocess.run(
            [str(amtool), "config", "routes", "test", f"--config.file={config}", *labels],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    on = "node=gpu-07"
    assert receiver("alertname=PlacewatchFallback", "severity=critical", on) == "gpu-oncall"
    assert receiver("alertname=PlacewatchFallback", "severity=warning", on) == "gpu-team"
    for name in ("PlacewatchNodeBlind", "PlacewatchShardBlind", "PlacewatchNodeDown"):
        assert receiver(f"alertname={name}", "severity=warning", on) == "gpu-team"
    assert receiver("alertname=PlacewatchGpuUnhealthy", "severity=critical") == "gpu-oncall"
    assert receiver("alertname=NodeDown", "severity=critical") == "default"


def test_a_fleet_wide_outage_pages_once_per_cause_and_nodes_speak_for_their_shards(
    tmp_path: Path, receivers: tuple[Endpoint, Endpoint]
) -> None:
    pager, team = receivers
    config = docs_config().replace(PAGER, pager.url).replace(TEAM, team.url)
    config = config.replace("group_wait: 30s", "group_wait: 2s")  # a test's patience
    am = Alertmanager(tmp_path / "alertmanager", config)
    am.start()
    try:
        fired = []
        for node in ROLLOUT:  # a driver rollout: each node blind, its shards with it
            fired += [
                alert("PlacewatchNodeBlind", "warning", node),
                alert("PlacewatchShardBlind", "warning", node, shard="llama"),
                alert("PlacewatchShardBlind", "warning", node, shard="qwen"),
                alert("PlacewatchFallback", "critical", node, shard="qwen", verdict="cpu_fallback"),
            ]
        fired += [  # one node down, its blindness and fallback with it; one fallback alone
            alert("PlacewatchNodeDown", "warning", "gpu-08"),
            alert("PlacewatchNodeBlind", "warning", "gpu-08"),
            alert("PlacewatchFallback", "critical", "gpu-08", shard="a", verdict="cpu_fallback"),
            alert("PlacewatchFallback", "critical", "gpu-09", shard="b", verdict="cpu_fallback"),
        ]
        post(am, fired)
        eventually(lambda: len(am.get("/api/v2/alerts")) == len(fired), 10, what="all held")
        held = {key(a): a["status"] for a in am.get("/api/v2/alerts")}
        suppressed = sorted(k for k, s in held.items() if s["state"] == "suppressed")
        assert suppressed == sorted(
            [
                *[(n, "PlacewatchShardBlind", s) for n in ROLLOUT for s in ("llama", "qwen")],
                *[(n, "PlacewatchFallback", "qwen") for n in ROLLOUT],
                ("gpu-08", "PlacewatchNodeBlind", ""),
                ("gpu-08", "PlacewatchFallback", "a"),
            ]
        )
        assert all(held[k]["inhibitedBy"] for k in suppressed)

        # One notification per cause: the rollout's six nodes in one, the node down in one,
        # the lone fallback in one; nothing for a suppressed alert.
        eventually(lambda: len(team.delivered()) >= 2 and pager.delivered(), 20, what="notified")
        time.sleep(3)  # past every group's wait (2 s): any other notification is here by now
        told = sorted(
            (n["receiver"], n["groupLabels"]["alertname"], sorted(nodes(n))) for n in
            [*team.delivered(), *pager.delivered()]
        )  # fmt: skip
        assert told == [
            ("gpu-oncall", "PlacewatchFallback", ["gpu-09"]),
            ("gpu-team", "PlacewatchNodeBlind", ROLLOUT),
            ("gpu-team", "PlacewatchNodeDown", ["gpu-08"]),
        ]
    finally:
        am.stop()


def post(am: Alertmanager, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        am.alerts_url,
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


def key(a: dict[str, Any]) -> tuple[str, str, str]:
    labels = a["labels"]
    return (labels["node"], labels["alertname"], labels.get("shard", ""))


def nodes(notification: dict[str, Any]) -> list[str]:
    return [a["labels"]["node"] for a in notification["alerts"]]
