"""A GPU tool outage as a real Prometheus (Debian's 2.42) sees it through the shipped alert
rules, scraping both a worker's own /metrics and the fleet exporter: a real worker whose
stand-in nvidia-smi reports 2 uncorrected ECC errors on GPU 1 fails for 40 s. No alert
resolves for want of evidence, the tool reads down meanwhile, and the node's blindness is
an alert of its own that ends when the tool is back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, free_port
from tests.support.eventually import eventually
from tests.support.exporter import Exporter
from tests.support.fleet_node import NODE, ShardNode, a100x2_health
from tests.support.prometheus import Prometheus

RULES = ROOT / "docs" / "prometheus" / "placewatch-rules.yml"
OUTAGE_S = 40.0
LIMIT_S = 5
"""The blindness limit the test gives the rules (theirs is 300 s): seconds, not minutes."""


def rules_with_limit(folder: Path, seconds: int) -> Path:
    """The shipped rules with their one parameter, the blindness limit (`300` and the
    `for: 5m` of PlacewatchNodeBlind), set to `seconds`; every other rule as shipped."""
    text = RULES.read_text()
    head, node_blind = text.split("      - alert: PlacewatchNodeBlind\n")
    assert head.count("placewatch_shard_evidence_age_seconds > 300 ") == 1
    assert node_blind.count("for: 5m") >= 1
    head = head.replace("evidence_age_seconds > 300 ", f"evidence_age_seconds > {seconds} ")
    node_blind = node_blind.replace("for: 5m", f"for: {seconds}s", 1)
    folder.mkdir(parents=True, exist_ok=True)
    changed = folder / "rules.yml"
    changed.write_text(head + "      - alert: PlacewatchNodeBlind\n" + node_blind)
    return changed


def firing(prometheus: Prometheus, name: str, **labels: str) -> dict[str, str]:
    """When each instance's firing alert `name` (with `labels`) became active, by instance."""
    return {
        a["labels"]["instance"]: a["activeAt"]
        for a in prometheus.alerts(name)
        if a["state"] == "firing" and labels.items() <= a["labels"].items()
    }


def values(prometheus: Prometheus, expr: str) -> dict[str, str]:
    """`expr`'s value by instance."""
    return {r["metric"]["instance"]: r["value"][1] for r in prometheus.query(expr)}


def test_a_40_s_tool_outage_resolves_no_alert_and_the_node_s_blindness_fires(
    node: ShardNode, tmp_path: Path
) -> None:
    node.fake_gpu.write("nvidia-smi", "query-gpu.csv", a100x2_health(2))  # GPU 1 unhealthy
    port = free_port()
    node.start("--metrics-listen", f"127.0.0.1:{port}")
    node.wait_published()
    exporter = Exporter(node.url, "--node", NODE)
    instances = {f"127.0.0.1:{port}", f"127.0.0.1:{exporter.port}"}
    prometheus = Prometheus(
        tmp_path / "prometheus", sorted(instances), rules=[rules_with_limit(tmp_path, LIMIT_S)]
    )
    prometheus.start()
    try:
        check_outage(node, prometheus, instances)
    finally:
        prometheus.stop()
        code, err = exporter.stop()
    assert code == 0, err
    assert "Traceback" not in err


def check_outage(node: ShardNode, prometheus: Prometheus, instances: set[str]) -> None:
    sick: dict[str, Any] = {}
    fallback: dict[str, Any] = {}

    def both_fire() -> bool:
        sick.update(firing(prometheus, "PlacewatchGpuUnhealthy", gpu="1"))
        fallback.update(firing(prometheus, "PlacewatchFallback", shard="idle"))
        return set(sick) == set(fallback) == instances

    eventually(both_fire, 60, every=0.5, what="GPU 1 unhealthy and idle's fallback firing")
    problems = {a["labels"]["problem"] for a in prometheus.alerts("PlacewatchGpuUnhealthy")}
    assert problems == {"uncorrected ECC error(s) since the last reset"}
    tool_up = 'placewatch_gpu_source_up{source="nvidia-smi"}'
    assert values(prometheus, tool_up) == dict.fromkeys(instances, "1")

    node.driver_lost(True)  # every nvidia-smi fails; the looping one hangs
    began = time.monotonic()
    eventually(
        lambda: values(prometheus, tool_up) == dict.fromkeys(instances, "0"),
        30,
        every=0.5,
        what="nvidia-smi down in Prometheus",
    )
    blind: dict[str, str] = {}
    while time.monotonic() - began < OUTAGE_S:  # the outage lasts this long: watched throughout
        assert firing(prometheus, "PlacewatchGpuUnhealthy", gpu="1") == sick
        assert firing(prometheus, "PlacewatchFallback", shard="idle") == fallback
        assert values(prometheus, tool_up) == dict.fromkeys(instances, "0")
        assert prometheus.alerts("PlacewatchShardBlind") == []  # the node's one alert says it
        blind.update(firing(prometheus, "PlacewatchNodeBlind", node=NODE))
        time.sleep(1)
    assert set(blind) == instances
    age = values(prometheus, 'placewatch_shard_evidence_age_seconds{shard="idle"}')
    assert all(float(v) >= OUTAGE_S - 10 for v in age.values()), age
    assert values(prometheus, 'placewatch_shard_stale{shard="idle"}') == dict.fromkeys(
        instances, "1"
    )
    # GPU 1's health is held as last read, its identity with it.
    ecc = values(prometheus, 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1"}')
    assert ecc == dict.fromkeys(instances, "2")
    assert values(prometheus, 'placewatch_gpu_stale{gpu="1"}') == dict.fromkeys(instances, "1")

    node.driver_lost(False)
    eventually(
        lambda: values(prometheus, tool_up) == dict.fromkeys(instances, "1"),
        30,
        every=0.5,
        what="nvidia-smi up again in Prometheus",
    )
    eventually(
        lambda: prometheus.alerts("PlacewatchNodeBlind") == [],
        15,
        every=0.5,
        what="the node's blindness ended",
    )
    # Never resolved: the same alerts, active since they first fired.
    assert firing(prometheus, "PlacewatchGpuUnhealthy", gpu="1") == sick
    assert firing(prometheus, "PlacewatchFallback", shard="idle") == fallback
    assert values(prometheus, 'placewatch_shard_stale{shard="idle"}') == dict.fromkeys(
        instances, "0"
    )
