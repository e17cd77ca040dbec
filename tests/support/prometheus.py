"""A real Prometheus for tests: Debian's `prometheus` package (2.42 in bookworm) on a free
loopback port with a temporary configuration and TSDB, and its `promtool`.

Queried through its HTTP API (`/api/v1/query`), as Grafana and alert rules read it.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port
from tests.support.ready import wait_ready

BINARY = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
DASHBOARD = ROOT / "docs" / "grafana" / "placewatch.json"
INSTALL = (
    "apt-get install prometheus (Debian and Ubuntu; it brings promtool too; .ci/run installs it)"
)


def need(binary: Path) -> Path:
    """The binary, or a skip that names the package to install, loudly."""
    if not binary.exists():
        pytest.skip(f"SKIPPED, NOT TESTED: {binary} not found: {INSTALL}")
    return binary


class Prometheus:
    def __init__(
        self,
        root: Path,
        targets: list[str],
        scrape_interval: str = "1s",
        metric_relabel: str = "",
        rules: list[Path] | None = None,
    ) -> None:
        """`metric_relabel`: the job's metric_relabel_configs, as YAML list items; `rules`:
        rule files it evaluates every second."""
        self.binary = need(BINARY)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "prometheus.yml"
        listed = ", ".join(f'"{t}"' for t in targets)
        files = ", ".join(json.dumps(str(r)) for r in rules or [])
        self.config.write_text(
            f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: 1s\n"
            f"rule_files: [{files}]\n"
            f"scrape_configs:\n  - job_name: placewatch\n    static_configs:\n"
            f"      - targets: [{listed}]\n"
            + (f"    metric_relabel_configs:\n{metric_relabel}" if metric_relabel else "")
        )
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.root / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
        )
        wait_ready(self.proc, f"{self.base}/-/ready", log, 20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` gives now: [{"metric": labels, "value": [time, "v"]}]."""
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_query(self, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
        """The first non-empty answer to `expr`; fails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.query(expr)
            if found:
                return found
            if time.monotonic() > deadline:
                targets = self.get("/api/v1/targets")
                raise AssertionError(f"no answer to {expr} within {timeout} s; targets: {targets}")
            time.sleep(0.5)

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """Its alerts of rule `name` as /api/v1/alerts lists them (pending and firing): each
        with `labels`, `state` and `activeAt`, which a resolve and a new firing would change."""
        found: list[dict[str, Any]] = self.get("/api/v1/alerts")["data"]["alerts"]
        return [a for a in found if a["labels"]["alertname"] == name]

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=5) as r:
            return json.loads(r.read())


def dashboard_exprs() -> dict[str, list[str]]:
    """Each panel's queries in docs/grafana/placewatch.json, by the panel's title."""
    board = json.loads(DASHBOARD.read_text())
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in board["panels"]}


def first_ups(prometheus: Prometheus, scrapes: int, timeout: float = 60) -> list[str]:
    """`up` of each of its one target's first `scrapes` scrapes ("1": answered in time), once
    it made that many; fails after `timeout` seconds."""

    def ups() -> list[str]:
        found = prometheus.query("up[10m]")
        return [value for _, value in found[0]["values"]] if found else []

    deadline = time.monotonic() + timeout
    while len(seen := ups()) < scrapes:
        assert time.monotonic() < deadline, f"{len(seen)} scrapes within {timeout} s: {seen}"
        time.sleep(0.5)
    return seen[:scrapes]
