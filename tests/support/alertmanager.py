"""A real Alertmanager for tests: Debian's prometheus-alertmanager (0.25 in bookworm) on a
free loopback port, with a temporary configuration and storage and no cluster gossip; and
a relay in front of it that can be told to refuse, as an Alertmanager that is down for a
while.

Alerts are read back as Alertmanager holds them, through `GET /api/v2/alerts`, which lists
active alerts only: one whose `endsAt` has passed is not there.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port
from tests.support.ready import wait_ready

BINARY = Path("/usr/bin/prometheus-alertmanager")
AMTOOL = Path("/usr/bin/amtool")
INSTALL = (
    "apt-get install prometheus-alertmanager (Debian and Ubuntu; it brings amtool too; "
    ".ci/run installs it)"
)

Alert = dict[str, Any]


def docs_config() -> str:
    """The Alertmanager configuration docs/consumers.md gives for placewatch's alerts."""
    doc = (ROOT / "docs" / "consumers.md").read_text()
    block = re.search(r"<!-- alertmanager-config -->\s*```yaml\n(.*?)```", doc, re.S)
    assert block, "docs/consumers.md lost its alertmanager-config block"
    return block.group(1)


def need(binary: Path) -> Path:
    if not binary.exists():
        pytest.skip(f"{binary} not found: {INSTALL}")
    return binary


class Alertmanager:
    def __init__(self, root: Path, config: str) -> None:
        self.binary = need(BINARY)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "alertmanager.yml"
        self.config.write_text(config)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.alerts_url = f"{self.base}/api/v2/alerts"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={self.config}",
                f"--storage.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "alertmanager.log").open("ab"),
        )
        wait_ready(self.proc, f"{self.base}/-/ready", self.root / "alertmanager.log", 15)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=5) as r:
            return json.loads(r.read())

    def version(self) -> str:
        return str(self.get("/api/v2/status")["versionInfo"]["version"])

    def alerts(self, shard: str | None = None) -> list[Alert]:
        """The active alerts it holds (of one shard), by their labels."""
        found: list[Alert] = self.get("/api/v2/alerts")
        if shard is not None:
            found = [a for a in found if a["labels"].get("shard") == shard]
        return sorted(found, key=lambda a: sorted(a["labels"].items()))

    def wait_alerts(
        self, check: Callable[[list[Alert]], bool], shard: str, timeout: float = 20
    ) -> list[Alert]:
        """The shard's active alerts once `check` holds for them; fails after `timeout`."""
        deadline = time.monotonic() + timeout
        found = self.alerts(shard)
        while not check(found):
            if time.monotonic() > deadline:
                raise AssertionError(f"alertmanager holds, for shard {shard}: {found}")
            time.sleep(0.2)
            found = self.alerts(shard)
        return found


class Relay:
    """Forwards each POST to `target`, or answers 503 while `refusing`; keeps every body."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.refusing = False
        self.forwarded: list[list[Alert]] = []
        self.refused: list[list[Alert]] = []
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code = relay._forward(body)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v2/alerts"
        self._lock = threading.Lock()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _forward(self, body: bytes) -> int:
        with self._lock:
            if self.refusing:
                self.refused.append(json.loads(body))
                return 503
        request = urllib.request.Request(
            self.target, data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                code = int(r.status)
        except urllib.error.HTTPError as exc:
            code = exc.code
        with self._lock:
            self.forwarded.append(json.loads(body))
        return code

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def firing(bodies: list[list[Alert]], shard: str) -> list[Alert]:
    """The firing alerts (no endsAt) of a shard in the bodies posted."""
    return [
        a for body in bodies for a in body if a["labels"]["shard"] == shard and "endsAt" not in a
    ]
