"""Deployment files: compose/docker-compose.yml and compose/Dockerfile (the image itself is
tests/integration/test_image.py; the systemd units test_systemd.py).

Nothing is built or started: the compose file is validated against the Compose
specification's schema and its values that matter are read back.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewatch.worker.config import ENV_CONFIG, FIELDS, env_name

from tests.conftest import ROOT

COMPOSE = ROOT / "compose" / "docker-compose.yml"


def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def check_jsonschema() -> str:
    beside = Path(sys.executable).parent / "check-jsonschema"
    found = str(beside) if beside.exists() else shutil.which("check-jsonschema")
    if found is None:
        pytest.fail("check-jsonschema not found: pip install -e '.[test]' installs it")
    return found


def test_compose_file_follows_the_compose_specification() -> None:
    done = subprocess.run(
        [check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_schema_check_catches_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    pid: host\n", "    pid: [host]\n"))
    done = subprocess.run(
        [check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr


def nats_version(image: str) -> tuple[int, ...]:
    match = re.fullmatch(r"nats:(\d+)\.(\d+)(?:\.\d+)?(?:-[\w.]+)?", image)
    assert match is not None, image
    return int(match.group(1)), int(match.group(2))


def flag(command: list[str], name: str) -> str:
    """The value of `--name=value` in a nats-server command line."""
    (value,) = [c.split("=", 1)[1] for c in command if c.startswith(f"--{name}=")]
    return value


def test_three_nats_servers_with_jetstream_routed_into_one_cluster() -> None:
    services = compose()["services"]
    names = sorted(n for n in services if n.startswith("nats-"))
    assert names == ["nats-1", "nats-2", "nats-3"]
    volumes = set()
    for name in names:
        service = services[name]
        assert nats_version(service["image"]) >= (2, 10)
        command = service["command"]
        assert "-js" in command
        assert flag(command, "server_name") == name
        assert flag(command, "cluster_name") == "placewatch"
        assert flag(command, "cluster") == "nats://0.0.0.0:6222"
        routes = set(flag(command, "routes").split(","))
        assert routes == {f"nats://{other}:6222" for other in names if other != name}
        volume, conf = service["volumes"]
        source, target = volume.split(":")
        assert target == flag(command, "store_dir")
        volumes.add(source)
        # The partition mapping (compose/nats.conf), read-only, from the file beside it.
        assert conf == f"./nats.conf:{flag(command, 'config')}:ro"
        assert command[0] == "--config=/etc/nats/placewatch.conf"
    assert volumes == {f"{n}-data" for n in names} == set(compose()["volumes"])


def test_worker_sees_host_pids_and_every_nvidia_gpu() -> None:
    worker = compose()["services"]["worker"]
    assert worker["pid"] == "host"
    assert (worker["cap_drop"], worker["cap_add"]) == (["ALL"], ["SYS_PTRACE", "DAC_READ_SEARCH"])
    assert worker["read_only"] is True
    assert worker["command"] == ["run"]
    assert worker["build"] == {"context": "..", "dockerfile": "compose/Dockerfile"}
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    env = worker["environment"]
    assert env["PLACEWATCH_NATS"].split(",") == [f"nats://nats-{i}:4222" for i in (1, 2, 3)]
    assert str(env["PLACEWATCH_REPLICAS"]) == "3"
    mounts = {m.split(":")[1]: m for m in worker["volumes"]}
    assert mounts["/sys/class/kfd"] == "/sys/class/kfd:/sys/class/kfd:ro"
    shards = env["PLACEWATCH_SHARDS"]
    assert mounts[shards] == f"./shards.toml:{shards}:ro"
    assert (COMPOSE.parent / "shards.toml").is_file()  # else docker binds a new empty folder
    logs = [m for m in worker["volumes"] if "PLACEWATCH_ENGINE_LOGS" in m]
    assert len(logs) == 1 and logs[0].endswith(":ro")
    for journal in ("/var/log/journal", "/run/log/journal"):  # services' output
        assert mounts[journal] == f"{journal}:{journal}:ro"
    assert worker["stop_signal"] == "SIGTERM"


def test_watch_and_alerts_read_the_same_cluster() -> None:
    services = compose()["services"]
    worker = services["worker"]
    assert services["watch"]["command"] == ["watch"]
    assert services["alerts"]["command"][:2] == ["alerts", "--webhook"]
    for name in ("watch", "alerts"):
        service = services[name]
        assert service["image"] == worker["image"]
        assert service["environment"]["PLACEWATCH_NATS"] == worker["environment"]["PLACEWATCH_NATS"]


def test_the_worker_s_healthcheck_asks_the_worker_and_watch_and_alerts_their_heartbeat() -> None:
    services = compose()["services"]
    worker = services["worker"]["healthcheck"]
    assert worker["test"] == ["CMD", "placewatch", "health"]
    assert worker["timeout"] == "10s"  # connect and answer, 3 s each, fit
    for name in ("watch", "alerts"):
        service = services[name]
        assert service["healthcheck"]["test"] == ["CMD", "placewatch", "health", "--heartbeat"]
        assert service["environment"]["PLACEWATCH_HEALTH_FILE"] == "/tmp/placewatch-health"
        assert service["healthcheck"]["start_period"] == "20s"
    assert "healthcheck" in services["nats-1"]


def test_each_node_serves_its_metrics_and_the_fleet_exporter_is_opt_in() -> None:
    services = compose()["services"]
    worker, exporter = services["worker"], services["exporter"]
    assert worker["environment"]["PLACEWATCH_METRICS_LISTEN"] == ":9400"
    assert worker["ports"] == ["9400:9400"]
    assert exporter["profiles"] == ["fleet-exporter"]  # scraped instead of the nodes, not too
    assert exporter["command"] == ["exporter", "--listen", "0.0.0.0:9400"]
    assert exporter["ports"] == ["9401:9400"]


def test_every_placewatch_variable_compose_sets_is_a_setting() -> None:
    known = {env_name(f) for f in FIELDS} | {ENV_CONFIG}
    for name, service in compose()["services"].items():
        for variable in service.get("environment", {}):
            if variable.startswith("PLACEWATCH_"):
                assert variable in known, (name, variable)


def test_dockerfile_installs_the_worker() -> None:
    text = (ROOT / "compose" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.12-slim$", text, re.MULTILINE)
    assert re.search(r"pip install --no-cache-dir /src \\$", text, re.MULTILINE)
    assert 'ENTRYPOINT ["placewatch"]' in text
    assert 'CMD ["run"]' in text
    # Everything it copies is let through .dockerignore, from the root the build runs in.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for copied in re.findall(r"^COPY (.+) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert f"!{path}" in ignore, path
            assert (ROOT / path).exists(), path
