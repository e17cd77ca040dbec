"""`placewatch run --metrics-listen`: each worker serves its own node on /metrics, scraped by a
real Prometheus the way dcgm-exporter's DaemonSet is, one target per node.

Two workers with the fake nvidia-smi replaying the two-A100 capture
(fixtures/nvidia-smi/a100x2-query-gpu.csv), on one real nats-server.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import (
    FIXTURES,
    GPU0,
    ROOT,
    FakeGpuTools,
    NatsServer,
    Worker,
    free_port,
    run_placewatch,
)
from tests.support.eventually import eventually
from tests.support.exporter import Exporter
from tests.support.prometheus import PROMTOOL, Prometheus, first_ups, need
from tests.support.slow_clients import flooding

NODES = ("gpu-a", "gpu-b")
OPENMETRICS = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"


def scrape(port: int, accept: str | None = None) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept is not None:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=5) as answer:
        return str(answer.read().decode())


def served_gpus(port: int) -> bool:
    try:
        return bool(samples(scrape(port), "DCGM_FI_DEV_FB_USED"))
    except OSError:
        return False  # not listening yet


def scrape_read(port: int) -> str:
    """A scrape of a tick that read the GPUs: one whose fake nvidia-smi missed the tick's
    deadline on a loaded machine serves none of their readings, by design (gpu/reads.py)."""
    texts: list[str] = []

    def read() -> bool:
        texts.append(scrape(port))
        return bool(samples(texts[-1], "DCGM_FI_DEV_FB_USED"))

    eventually(read, timeout=20, what="a tick that read the GPUs")
    return texts[-1]


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


@pytest.fixture
def node_workers(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, tmp_path: Path
) -> Iterator[dict[str, int]]:
    """Each node's worker, and the port its /metrics is on."""
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu-health.csv")
    ports = {node: free_port() for node in NODES}
    started = []
    for node, port in ports.items():
        env = fake_gpu.env() | {"PLACEWATCH_STATE_DIR": str(tmp_path / node)}
        argv = ["--nats", nats_server.url, "--node", node, "--interval", "0.5"]
        started.append(Worker(*argv, "--metrics-listen", f"127.0.0.1:{port}", env=env))
    try:
        for port in ports.values():
            eventually(functools.partial(served_gpus, port), timeout=20, what="its GPUs")
        yield ports
    finally:
        for w in started:
            w.close()


def test_each_node_serves_its_own_gpus_under_dcgm_names(node_workers: dict[str, int]) -> None:
    for node, port in node_workers.items():
        text = scrape_read(port)
        used = samples(text, "DCGM_FI_DEV_FB_USED")
        # a100x2-query-gpu.csv: GPU 0 uses 40960 MiB
        assert sorted((labels["gpu"], labels["Hostname"]) for labels, _ in used) == [
            ("0", node),
            ("1", node),
        ]
        (gpu0,) = [labels | {"value": str(v)} for labels, v in used if labels["gpu"] == "0"]
        assert gpu0 == {
            "gpu": "0",
            "UUID": GPU0,
            "pci_bus_id": "00000000:07:00.0",
            "device": "nvidia0",
            "modelName": "NVIDIA A100-SXM4-80GB",
            "Hostname": node,
            "value": "40960.0",
        }
        assert samples(text, "placewatch_node_up") == [({"node": node}, 1.0)]
        # Prometheus asks for OpenMetrics first: the same samples, in that format
        open_metrics = scrape(port, OPENMETRICS)
        assert open_metrics.rstrip().endswith("# EOF")


def test_promtool_finds_nothing_but_dcgm_s_own_label_names(node_workers: dict[str, int]) -> None:
    promtool = need(PROMTOOL)
    text = scrape_read(node_workers["gpu-a"])
    done = subprocess.run(
        [str(promtool), "check", "metrics"], check=False, input=text, capture_output=True, text=True
    )
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert complaints, "promtool names DCGM's camelCase labels; an empty answer is suspect"
    assert all("camelCase" in line or "UUID" in line for line in complaints), complaints


def test_prometheus_scraping_each_node_never_mixes_them(
    node_workers: dict[str, int], tmp_path: Path
) -> None:
    targets = [f"127.0.0.1:{port}" for port in node_workers.values()]
    prometheus = Prometheus(tmp_path / "prometheus", targets)
    prometheus.start()
    try:
        eventually(lambda: len(prometheus.query("DCGM_FI_DEV_FB_USED")) == 4, timeout=30)
        found = prometheus.query("DCGM_FI_DEV_FB_USED")
        by_instance = {f"127.0.0.1:{port}": node for node, port in node_workers.items()}
        for series in found:
            labels = series["metric"]
            assert by_instance[labels["instance"]] == labels["Hostname"], labels
        per_node = prometheus.query("count by (instance, Hostname) (DCGM_FI_DEV_FB_USED)")
        assert sorted(r["value"][1] for r in per_node) == ["2", "2"]
    finally:
        prometheus.stop()


def test_prometheus_scrapes_a_node_through_1000_slow_connections(
    node_workers: dict[str, int], tmp_path: Path
) -> None:
    port = node_workers["gpu-a"]
    with flooding("127.0.0.1", port, 1000) as flood:
        started = time.monotonic()
        assert samples(scrape(port), "placewatch_node_up") == [({"node": "gpu-a"}, 1.0)]
        assert time.monotonic() - started < 5
        prometheus = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], "3s")
        prometheus.start()
        try:
            assert first_ups(prometheus, 3) == ["1", "1", "1"]  # each within its 3 s timeout
        finally:
            prometheus.stop()
        assert flood.stop() > 0


def test_a_bad_or_busy_listen_address_stops_the_worker_naming_it(nats_server: NatsServer) -> None:
    done = run_placewatch(
        "run", "--nats", nats_server.url, "--node", "n1", "--metrics-listen", "host:port"
    )
    assert done.returncode == 2
    assert done.stderr.startswith("placewatch: --metrics-listen: 'host:port' is not HOST:PORT")
    with socket_in_use() as port:
        done = run_placewatch(
            "run",
            "--nats",
            nats_server.url,
            "--node",
            "n1",
            "--metrics-listen",
            f"127.0.0.1:{port}",
        )
    assert done.returncode == 2
    assert f"--metrics-listen 127.0.0.1:{port}: cannot serve there" in done.stderr
    assert "Traceback" not in done.stderr


class socket_in_use:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *_: object) -> None:
        self.sock.close()


DASHBOARD = FIXTURES / "grafana" / "dcgm-exporter-dashboard.json"
PROFILING = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
"""DCGM's profiling counter, which no NVML or nvidia-smi reading gives: its panel stays
empty on placewatch, as on a dcgm-exporter without profiling metrics."""


def dashboard_draws_each_node_apart(prometheus: Prometheus, by_instance: dict[str, str]) -> None:
    """Every panel of dcgm-exporter's own dashboard, asked for each node (its `$instance`
    variable): data from that node only, never one series of two nodes."""
    board = json.loads(DASHBOARD.read_text())
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in board["panels"]}
    eventually(lambda: len(prometheus.query("DCGM_FI_DEV_SM_CLOCK")) == 4, timeout=30)
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "instance"]
    offered = prometheus.query(
        f"count by (instance) ({variable['query'].split('(')[1].split(',')[0]})"
    )
    assert sorted(r["metric"]["instance"] for r in offered) == sorted(by_instance)
    drawn = 0
    for title, exprs in panels.items():
        for expr in exprs:
            for instance, node in by_instance.items():
                asked = expr.replace("$instance", instance.replace(".", "\\\\.")).replace(
                    "$gpu", ".*"
                )
                found = prometheus.query(asked)
                if PROFILING in expr:
                    assert found == [], title
                    continue
                assert found, f"{title}: no data for {node}"
                for series in found:
                    labels = series["metric"]
                    assert labels.get("instance", instance) == instance, (title, labels)
                    assert labels.get("Hostname", node) == node, (title, labels)
                drawn += 1
    assert drawn == 2 * (len(panels) - 1)


def test_nvidia_s_dashboard_draws_each_node_apart(
    node_workers: dict[str, int], tmp_path: Path
) -> None:
    by_instance = {f"127.0.0.1:{port}": node for node, port in node_workers.items()}
    prometheus = Prometheus(tmp_path / "prometheus", list(by_instance))
    prometheus.start()
    try:
        dashboard_draws_each_node_apart(prometheus, by_instance)
    finally:
        prometheus.stop()


def test_the_dashboard_on_the_fleet_exporter_with_the_documented_relabel_rule(
    node_workers: dict[str, int], nats_server: NatsServer, tmp_path: Path
) -> None:
    """One exporter for both nodes: its `instance` is the exporter, until the rule of
    docs/exporter.md copies each series' Hostname into it."""
    doc = (ROOT / "docs" / "exporter.md").read_text()
    block = doc.split("    metric_relabel_configs:\n", 1)[1].split("```", 1)[0]
    exporter = Exporter(nats_server.url)
    prometheus = Prometheus(
        tmp_path / "prometheus", [f"127.0.0.1:{exporter.port}"], metric_relabel=block
    )
    prometheus.start()
    try:
        dashboard_draws_each_node_apart(prometheus, {node: node for node in node_workers})
    finally:
        prometheus.stop()
        code, err = exporter.stop()
        assert code == 0, err
