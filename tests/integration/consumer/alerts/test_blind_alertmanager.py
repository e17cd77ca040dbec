"""Blindness in `placewatch alerts --format alertmanager`, against a real Alertmanager
(Debian's 0.25) with the docs' configuration, fed by a real worker whose stand-in nvidia-smi
fails: past the limit (`--blind-after`, small here) the node's blindness and its shards'
are alerts of their own, the node's inhibiting its shards'; they end when the tool is back,
and the shard's fallback, held throughout, never resolves."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.alertmanager import Alert, Alertmanager, docs_config
from tests.support.alerts_cli import Alerts
from tests.support.eventually import eventually
from tests.support.fleet_node import NODE, ShardNode

LIMIT_S = 3.0
ARGS = ("--format", "alertmanager", "--resend", "1", "--blind-after", f"{LIMIT_S:g}")


def named(am: Alertmanager, alertname: str) -> list[Alert]:
    return [a for a in am.alerts() if a["labels"]["alertname"] == alertname]


def test_a_node_blind_past_the_limit_is_alerted_and_ends_when_its_tool_answers(
    node: ShardNode, alerts: list[Alerts], tmp_path: Path
) -> None:
    am = Alertmanager(tmp_path / "alertmanager", docs_config())
    am.start()
    try:
        node.start()
        node.wait_published()
        alerts.append(Alerts("--nats", node.url, "--webhook", am.alerts_url, *ARGS))
        (fallback,) = am.wait_alerts(lambda found: len(found) == 1, "idle")
        assert named(am, "PlacewatchNodeBlind") == []

        node.driver_lost(True)
        lost = time.monotonic()
        eventually(lambda: named(am, "PlacewatchNodeBlind"), 30, every=0.1, what="node blind")
        assert time.monotonic() - lost >= LIMIT_S  # not before the limit
        (blind,) = named(am, "PlacewatchNodeBlind")
        assert blind["labels"] == {
            "alertname": "PlacewatchNodeBlind",
            "node": NODE,
            "severity": "warning",
        }
        assert blind["status"]["state"] == "active"
        assert [r["name"] for r in blind["receivers"]] == ["gpu-team"]
        assert "nvidia-smi" in blind["annotations"]["description"]
        eventually(
            lambda: len(named(am, "PlacewatchShardBlind")) == 2, 15, what="both shards blind"
        )
        # The node speaks for its shards: their blindness and the fallback are held, muted.
        shards = {a["labels"]["shard"]: a["status"] for a in named(am, "PlacewatchShardBlind")}
        assert sorted(shards) == ["holding", "idle"]
        assert all(s["state"] == "suppressed" and s["inhibitedBy"] for s in shards.values())
        (held,) = named(am, "PlacewatchFallback")
        assert held["labels"] == fallback["labels"]
        assert held["status"]["state"] == "suppressed"

        node.driver_lost(False)
        eventually(
            lambda: named(am, "PlacewatchNodeBlind") == named(am, "PlacewatchShardBlind") == [],
            30,
            every=0.2,
            what="blindness ended",
        )
        (after,) = [
            a for a in am.alerts("idle") if a["labels"]["alertname"] == "PlacewatchFallback"
        ]
        assert (after["labels"], after["startsAt"]) == (fallback["labels"], fallback["startsAt"])
        assert after["status"]["state"] == "active"
        code, _, err = alerts[-1].stop()
        assert code == 0, err
        assert "Traceback" not in err
    finally:
        am.stop()
