"""The exporter's documents: the Grafana dashboard and the alert rules ask only for metrics
the exporter serves, the rules pass promtool, and docs/exporter.md lists every metric."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import yaml

from placewatch.consumer.mapping import KINDS
from placewatch.prometheus.metrics import (
    GPU_METRICS,
    PARTITION_PROBLEM,
    PARTITION_PROBLEM_HELP,
    served,
)

from tests.conftest import ROOT
from tests.support.prometheus import DASHBOARD, PROMTOOL, dashboard_exprs, need

RULES = ROOT / "docs" / "prometheus" / "placewatch-rules.yml"
RULES_TEST = ROOT / "docs" / "prometheus" / "placewatch-rules.test.yml"

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "sum", "count", "max", "min", "avg", "max_over_time", "min_over_time", "rate", "increase", "topk",
    "bottomk", "absent", "offset", "bool", "abs", "label_replace",
    "ALERTS",  # Prometheus's own series of its alerts: a rule that holds reads its own
}  # fmt: skip
"""The PromQL functions and keywords the documents may use; any other name must be a metric."""


def all_dashboard_exprs() -> list[str]:
    return [e for exprs in dashboard_exprs().values() for e in exprs]


def rule_exprs() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    """The names `expr` asks for as metrics: what is left once label matchers, grouping
    labels, durations, strings and PromQL's own words are taken out."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", bare)
    bare = re.sub(r"\[[^\]]*\]|\"[^\"]*\"", "", bare)
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare) if w not in PROMQL_WORDS}


def test_every_dashboard_panel_asks_only_for_metrics_the_exporter_serves() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "placewatch"
    assert all(p["targets"] for p in board["panels"])
    titles = {p["title"] for p in board["panels"]}
    assert {"GPUs by verdict", "Fallbacks", "Foreign memory", "GPU utilization"} <= titles
    asked: set[str] = set()
    for expr in all_dashboard_exprs():
        names = metric_names(expr)
        assert names, expr
        assert names <= set(served()), f"{expr} asks for {names - set(served())}"
        asked |= names
    assert {"placewatch_shard_verdict", "placewatch_gpu_foreign_bytes"} <= asked


def test_alert_rules_ask_only_for_served_metrics_and_match_the_alerts_severities() -> None:
    for expr in rule_exprs():
        assert metric_names(expr) <= set(served()), expr
    rules: list[dict[str, Any]] = [
        r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
    ]
    fallback = {
        r["labels"]["severity"]: r["expr"] for r in rules if r["alert"] == "PlacewatchFallback"
    }
    # As `placewatch alerts --format alertmanager`: critical for cpu_fallback, warning for the rest.
    assert fallback == {
        "critical": 'placewatch_shard_verdict{verdict="cpu_fallback"} == 1',
        "warning": 'placewatch_shard_verdict{verdict=~"partial|misplaced"} == 1',
    }


def test_promtool_checks_and_unit_tests_the_alert_rules() -> None:
    promtool = need(PROMTOOL)
    checked = subprocess.run(
        [str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 15 rules found" in checked.stdout
    tested = subprocess.run(
        [str(promtool), "test", "rules", RULES_TEST.name],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_exporter_md_lists_every_metric_with_its_source_field_and_every_partition_problem() -> None:
    doc = (ROOT / "docs" / "exporter.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", doc, re.M)}
    assert set(served()) <= set(rows), set(served()) - set(rows)
    for metric in GPU_METRICS:
        assert f"`{metric.field}`" in rows[metric.name], metric.name
    for kind in KINDS:  # what a partition check may find, each named where it is served
        assert f"`{kind}`" in rows[PARTITION_PROBLEM], kind
        assert kind in PARTITION_PROBLEM_HELP, kind


def test_readme_links_the_exporter() -> None:
    assert "(docs/exporter.md)" in (ROOT / "README.md").read_text()


def test_ci_installs_prometheus() -> None:
    assert "apt-get install -y -q prometheus" in (ROOT / ".ci" / "run").read_text()
