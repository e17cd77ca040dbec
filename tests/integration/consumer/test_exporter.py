"""`placewatch exporter` as a process: a real worker publishes, the exporter serves /metrics,
and a real Prometheus scrapes it and answers queries with the stand-in tools' values."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from placewatch.schemas import NodeSample, encode, lean, partitions, subjects

from tests.conftest import (
    GPU0,
    GPU1,
    NatsServer,
    free_port,
    run_placewatch,
)
from tests.support.exporter import Exporter, publish_nodes
from tests.support.fleet_node import HOLDING_MIB, NODE, ShardNode, a100x2_health
from tests.support.held import UUID0, sick_node
from tests.support.prometheus import Prometheus, dashboard_exprs, first_ups
from tests.support.slow_clients import flooding

MIB = 1 << 20


def samples(text: str, name: str) -> list[Sample]:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for e in started:
        if e.proc.poll() is None:
            e.proc.kill()
            e.proc.communicate()


def test_prometheus_scrapes_gpu_metrics_and_verdicts_with_the_tools_values(
    node: ShardNode, exporters: list[Exporter], tmp_path: Path
) -> None:
    # The GPUs' answer with health columns, all healthy, and the processes' answer again
    # after it (what the GPUs' memory follows from: tests/support/gpu_tool.py).
    node.fake_gpu.write("nvidia-smi", "query-gpu.csv", a100x2_health(0))
    node.idle_on_gpu(False)
    node.start()
    node.wait_published()
    exporter = Exporter(node.url)
    exporters.append(exporter)
    prometheus = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{exporter.port}"])
    prometheus.start()
    try:
        # a100x2-query-gpu.csv: GPU 0 uses 40960 MiB of 81920, 37 %, 45 C, 212.34 W
        (used,) = prometheus.wait_query(f'DCGM_FI_DEV_FB_USED{{UUID="{GPU0}"}}')
        assert used["value"][1] == "40960"
        assert used["metric"] | {"instance": "", "job": ""} == {
            "__name__": "DCGM_FI_DEV_FB_USED",
            "gpu": "0",
            "UUID": GPU0,
            "pci_bus_id": "00000000:07:00.0",
            "device": "nvidia0",
            "modelName": "NVIDIA A100-SXM4-80GB",
            "Hostname": NODE,
            "instance": "",
            "job": "",
        }
        (power,) = prometheus.query(f'DCGM_FI_DEV_POWER_USAGE{{Hostname="{NODE}"}}')
        assert float(power["value"][1]) == 212.34  # GPU 1 gave [N/A]: no sample
        (foreign,) = prometheus.query('placewatch_gpu_foreign_bytes{gpu="0"}')
        assert int(foreign["value"][1]) == (40960 - HOLDING_MIB) * MIB
        verdicts = prometheus.wait_query("placewatch_shard_verdict == 1")
        assert sorted((v["metric"]["shard"], v["metric"]["verdict"]) for v in verdicts) == [
            ("holding", "gpu"),
            ("idle", "cpu_fallback"),
        ]
        (held,) = prometheus.query("placewatch_shard_gpu_bytes")
        assert (held["metric"]["shard"], held["metric"]["gpu"]) == ("holding", "0")
        assert int(held["value"][1]) == HOLDING_MIB * MIB
        (up,) = prometheus.query(f'placewatch_node_up{{node="{NODE}"}}')
        assert up["value"][1] == "1"
        # Every query of the Grafana dashboard parses and runs; the GPUs by verdict: GPU 0
        # holds the shard in `gpu`, the shard in cpu_fallback holds nothing on GPU 1.
        panels = dashboard_exprs()
        for expr in (e for exprs in panels.values() for e in exprs):
            prometheus.query(expr)
        by_verdict = prometheus.query(panels["GPUs by verdict"][0])
        assert [(v["metric"], v["value"][1]) for v in by_verdict] == [({"verdict": "gpu"}, "1")]
        (fallback,) = prometheus.query(panels["Fallbacks"][0])
        assert fallback["metric"]["shard"] == "idle"
        # The shard gets memory on its GPU: the next scrapes say gpu, and the old series ends.
        node.idle_on_gpu(True)
        deadline = time.monotonic() + 20
        while prometheus.query('placewatch_shard_verdict{shard="idle",verdict="gpu"}') == []:
            assert time.monotonic() < deadline, prometheus.query("placewatch_shard_verdict")
            time.sleep(0.5)
        assert (
            prometheus.query('placewatch_shard_verdict{shard="idle",verdict="cpu_fallback"}') == []
        )
        # GPU 1 reports two uncorrected ECC errors: its clocks and counts under DCGM's
        # names, and GPU 1 unhealthy, as the stand-in nvidia-smi gave them.
        healthy = prometheus.query(f'placewatch_gpu_healthy{{Hostname="{NODE}"}}')
        assert sorted((h["metric"]["gpu"], h["value"][1]) for h in healthy) == [
            ("0", "1"),
            ("1", "1"),
        ]
        node.fake_gpu.write("nvidia-smi", "query-gpu.csv", a100x2_health(2))
        node.idle_on_gpu(True)
        (sick,) = prometheus.wait_query(f'placewatch_gpu_healthy{{UUID="{GPU1}"}} == 0')
        assert sick["metric"]["gpu"] == "1"
        (dbe,) = prometheus.query(f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{UUID="{GPU1}"}}')
        assert dbe["value"][1] == "2"
        clocks = prometheus.query(f'DCGM_FI_DEV_SM_CLOCK{{Hostname="{NODE}"}}')
        assert sorted((c["metric"]["gpu"], c["value"][1]) for c in clocks) == [
            ("0", "1410"),
            ("1", "210"),
        ]
        (fine,) = prometheus.query(f'placewatch_gpu_healthy{{UUID="{GPU0}"}}')
        assert fine["value"][1] == "1"
    finally:
        prometheus.stop()
    node.stop()
    code, err = exporter.stop()
    assert code == 0, err
    assert "Traceback" not in err


def publish_until(url: str, sample: NodeSample, served: Callable[[], bool]) -> None:
    """Publish `sample` as its node would (its inventory, then its telemetry) until `served()`:
    the exporter takes the live messages once its view has started."""
    inventory, telemetry = lean.split(sample)

    async def publish() -> None:
        nc = await nats.connect(url)
        try:
            deadline = time.monotonic() + 20
            while True:
                for message, subject in (
                    (inventory, subjects.inventory(sample.node)),
                    (telemetry, subjects.telemetry(sample.node)),
                ):
                    payload, headers = encode(message)
                    await nc.publish(subject, payload, headers=headers)
                await nc.flush()
                if await anyio.to_thread.run_sync(served):
                    return
                assert time.monotonic() < deadline, "the exporter never served the sample"
                await anyio.sleep(0.3)
        finally:
            await nc.close()

    anyio.run(publish, backend="asyncio")


# XIDs come from NVML's event set, which no stand-in tool gives a worker: the node's
# messages are constructed, as a worker publishes them.
def test_prometheus_scrapes_gpu_health_and_the_dashboard_s_health_panel_runs(
    nats_server: NatsServer, exporters: list[Exporter], tmp_path: Path
) -> None:
    exporter = Exporter(nats_server.url)
    exporters.append(exporter)
    sample = sick_node("gpu-09", datetime.now(UTC))
    publish_until(nats_server.url, sample, lambda: "placewatch_gpu_healthy{" in exporter.metrics())
    prometheus = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{exporter.port}"])
    prometheus.start()
    try:
        healthy = prometheus.wait_query('placewatch_gpu_healthy{Hostname="gpu-09"}')
        assert sorted((h["metric"]["gpu"], h["value"][1]) for h in healthy) == [
            ("0", "0"),
            ("1", "1"),
        ]
        (clock,) = prometheus.query("DCGM_FI_DEV_SM_CLOCK")
        assert (clock["metric"]["UUID"], clock["value"][1]) == (UUID0, "1410")
        (energy,) = prometheus.query("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        assert energy["value"][1] == "123456790"  # mJ
        problems = prometheus.query("placewatch_gpu_problem")
        assert sorted(p["metric"]["problem"] for p in problems) == [
            "XID 79 (GPU has fallen off the bus)",
            "uncorrected ECC error(s) since the last reset",
        ]
        on_sick = prometheus.query("placewatch_shard_unhealthy_gpu")
        assert sorted(s["metric"]["shard"] for s in on_sick) == ["llama", "qwen"]
        panels = dashboard_exprs()
        for expr in (e for exprs in panels.values() for e in exprs):
            prometheus.query(expr)
        unhealthy = prometheus.query(panels["Unhealthy GPUs"][0])
        assert [(u["metric"]["Hostname"], u["metric"]["gpu"]) for u in unhealthy] == [
            ("gpu-09", "0")
        ]
    finally:
        prometheus.stop()
    code, err = exporter.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_prometheus_scrapes_the_exporter_through_1000_slow_connections(
    nats_server: NatsServer, exporters: list[Exporter], tmp_path: Path
) -> None:
    exporter = Exporter(nats_server.url)
    exporters.append(exporter)
    up = 'placewatch_node_up{node="gpu-09"} 1.0'
    publish_until(
        nats_server.url, sick_node("gpu-09", datetime.now(UTC)), lambda: up in exporter.metrics()
    )
    with flooding("127.0.0.1", exporter.port, 1000) as flood:
        started = time.monotonic()
        assert up in exporter.metrics()
        assert time.monotonic() - started < 5
        prometheus = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{exporter.port}"], "3s")
        prometheus.start()
        try:
            assert first_ups(prometheus, 3) == ["1", "1", "1"]  # each within its 3 s timeout
        finally:
            prometheus.stop()
        assert flood.stop() > 0
    code, err = exporter.stop()
    assert code == 0, err


def test_a_hostile_node_name_reaches_metrics_as_its_escapes(
    nats_server: NatsServer, exporters: list[Exporter]
) -> None:
    """A node named to retitle and clear a terminal, ring, reverse the text after it and break
    a line: /metrics shows it as escapes, printed in a terminal as plain text."""
    hostile = "gpu\x1b]0;pwned\x07\x1b[2J\u202e-09\nsecond"
    shown = r"gpu\x1b]0;pwned\x07\x1b[2J\u202e-09\nsecond"
    exporter = Exporter(nats_server.url)
    exporters.append(exporter)
    wire = f'placewatch_node_up{{node="{shown.replace(chr(92), chr(92) * 2)}"}} 1.0'
    publish_until(
        nats_server.url, sick_node(hostile, datetime.now(UTC)), lambda: wire in exporter.metrics()
    )
    text = exporter.metrics()
    assert not any(c in text for c in ("\x1b", "\x07", "\u202e")), text
    assert all(line.isprintable() for line in text.splitlines())
    up = samples(text, "placewatch_node_up")
    assert [s.labels for s in up] == [{"node": shown}]
    hostnames = {s.labels["Hostname"] for s in samples(text, "DCGM_FI_DEV_FB_USED")}
    assert hostnames == {shown}
    code, err = exporter.stop()
    assert code == 0, err


def test_a_node_that_stops_sending_leaves_metrics_after_stale_after(
    node: ShardNode, exporters: list[Exporter]
) -> None:
    node.start()
    node.wait_published()
    exporter = Exporter(node.url, "--stale-after", "3", "--node", NODE)
    exporters.append(exporter)
    text = exporter.wait_metrics(f'placewatch_node_up{{node="{NODE}"}} 1.0')
    free = {s.labels["gpu"]: s.value for s in samples(text, "DCGM_FI_DEV_FB_FREE")}
    assert free == {"0": 40405.0, "1": 81365.0}
    node.stop()
    text = exporter.wait_metrics(f'node="{NODE}"', present=False, timeout=15)
    assert samples(text, "DCGM_FI_DEV_FB_USED") == []
    assert "# TYPE DCGM_FI_DEV_FB_USED gauge" in text  # the family stays, empty
    code, err = exporter.stop()
    assert code == 0, err


def test_a_bad_listen_address_exits_2_naming_it() -> None:
    done = run_placewatch("exporter", "--listen", "localhost")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--listen: 'localhost' is not HOST:PORT" in done.stderr.splitlines()[-1]


def test_a_port_in_use_exits_1_with_one_line_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = run_placewatch(
            "exporter", "--listen", f"127.0.0.1:{port}", "--nats", f"nats://127.0.0.1:{free_port()}"
        )
    assert done.returncode == 1
    assert time.monotonic() - started < 10
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"placewatch: --listen 127.0.0.1:{port}: cannot serve there (")
    assert "in use" in line


def test_an_exporter_told_another_n_than_the_servers_serves_what_it_found(
    tmp_path: Path, exporters: list[Exporter]
) -> None:
    """On servers that make 4 partitions, an exporter of partition 1 of 2 serves
    placewatch_partition_problem{kind="more_partitions"} (the nodes of partitions 2 and 3 are
    in no exporter), and one of partition 1 of 4 serves none."""
    server = NatsServer(tmp_path / "js", config=partitions.server_config("placewatch", 4))
    server.start()
    nodes = [f"gpu-{i:03d}" for i in range(20)]
    ours = {n for n in nodes if partitions.partition_of(n, 4) == 1}
    assert {partitions.partition_of(n, 4) for n in nodes} == {0, 1, 2, 3}

    async def publish() -> None:
        nc = await nats.connect(server.url)
        try:
            await publish_nodes(nc, nodes)
        finally:
            await nc.close()

    def up(text: str) -> set[str]:
        return {s.labels["node"] for s in samples(text, "placewatch_node_up")}

    try:
        right = Exporter(server.url, "--partition", "1/4")
        wrong = Exporter(server.url, "--partition", "1/2")
        exporters += [right, wrong]
        deadline = time.monotonic() + 20
        while up(right.metrics()) != ours or "placewatch_partition_problem{" not in (
            text := wrong.metrics()
        ):
            assert time.monotonic() < deadline, text
            anyio.run(publish)  # until both views have started and taken it live
            time.sleep(0.2)
        assert [(s.labels, s.value) for s in samples(text, "placewatch_partition_problem")] == [
            ({"kind": "more_partitions"}, 1.0)
        ]
        text = right.metrics()
        assert "# TYPE placewatch_partition_problem gauge" in text
        assert samples(text, "placewatch_partition_problem") == []
        for exporter in (right, wrong):
            code, err = exporter.stop()
            assert code == 0, err
        assert err.count("the servers' mapping makes more than the 2 partitions given") == 1
    finally:
        server.stop()


def test_an_exporter_counts_what_one_node_published_about_another(
    nats_server: NatsServer, exporters: list[Exporter]
) -> None:
    """Telemetry on gpu-07's subject naming gpu-08: the exporter serves no gpu-08, counts it
    in placewatch_unreadable_messages_total{reason="impostor"} and logs the first, naming the
    subject."""
    _, telemetry = lean.split(
        NodeSample(node="gpu-08", session="s", seq=0, time=datetime.now(UTC), interval_s=1)
    )

    async def publish() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            payload, headers = encode(telemetry)
            await nc.publish(subjects.telemetry("gpu-07"), payload, headers=headers)
            await nc.flush()
        finally:
            await nc.close()

    def counted(text: str) -> float:
        found = samples(text, "placewatch_unreadable_messages_total")
        return sum(s.value for s in found if s.labels["reason"] == "impostor")

    exporter = Exporter(nats_server.url)
    exporters.append(exporter)
    deadline = time.monotonic() + 20
    while counted(text := exporter.metrics()) < 3:  # the first ones may come before its view
        assert time.monotonic() < deadline, text
        anyio.run(publish)
        time.sleep(0.2)
    assert samples(exporter.metrics(), "placewatch_node_up") == []
    code, err = exporter.stop()
    assert code == 0, err
    assert err.count("ignored a NodeTelemetry on placewatch.telemetry.gpu-07: it names") == 1
