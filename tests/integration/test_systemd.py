"""The systemd units in deploy/systemd/: what they run, and how little else they may do.

`systemd-analyze security --offline=true` rates a unit file without a running systemd;
where the tool is missing those tests skip, saying so.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from placewatch.cli import EXIT_CONFIG, EXIT_LEASE_LOST
from placewatch.worker.config import ENV_CONFIG, FIELDS, env_name, load
from placewatch.worker.forget import duration

from tests.conftest import ROOT

UNITS = ROOT / "deploy" / "systemd"
WORKER = UNITS / "placewatch.service"
ALERTS = UNITS / "placewatch-alerts.service"
FORGET = UNITS / "placewatch-forget.service"
EXPORTER = UNITS / "placewatch-exporter.service"
FORGET_TIMER = UNITS / "placewatch-forget.timer"
MOST_EXPOSURE = 5.0
needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="SYSTEMD-ANALYZE NOT FOUND: the units' keys and exposure were not checked",
)


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def values(path: Path, key: str) -> list[str]:
    """Every value a key is given in [Service] (configparser keeps the last one only)."""
    section = path.read_text().split("[Service]")[1].split("\n[")[0]
    return re.findall(rf"^{key}=(.*)$", section, re.M)


def test_the_worker_unit_runs_the_installed_worker() -> None:
    service = unit(WORKER)["Service"]
    assert service["ExecStart"] == "/opt/placewatch/bin/placewatch run"
    assert service["EnvironmentFile"] == "-/etc/placewatch/env"
    assert service["StateDirectory"] == "placewatch"
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == str(EXIT_LEASE_LOST)  # no tug of war
    assert "# 3: another worker took this node over (--takeover)." in WORKER.read_text()
    assert service["KillSignal"] == "SIGTERM"
    assert service["TimeoutStopSec"] == "10"
    assert unit(WORKER)["Install"]["WantedBy"] == "multi-user.target"
    assert values(WORKER, "Environment") == [
        "PLACEWATCH_HEALTH_FILE=%t/placewatch/health",
        "PLACEWATCH_METRICS_LISTEN=:9400",
    ]


def test_the_worker_unit_serves_the_nodes_metrics_on_the_documented_port() -> None:
    (listen,) = [v for v in values(WORKER, "Environment") if "METRICS" in v]
    name, address = listen.split("=", 1)
    assert name == env_name("metrics_listen")
    assert load({}, environ={name: address}).metrics_listen == address  # a valid setting
    assert f"`placewatch run --metrics-listen {address}`" in (ROOT / "docs/exporter.md").read_text()
    assert f"`{address}` (`{name}`)" in (UNITS / "README.md").read_text()


def test_the_worker_keeps_what_it_needs_to_read_gpus_and_proc() -> None:
    service = unit(WORKER)["Service"]
    assert set(service["CapabilityBoundingSet"].split()) == {
        "CAP_SYS_PTRACE",
        "CAP_DAC_READ_SEARCH",
    }
    assert service["DevicePolicy"] == "closed"
    assert values(WORKER, "DeviceAllow") == [
        "char-nvidia-frontend rw",
        "char-nvidia-caps rw",
        "char-nvidia-uvm rw",
        "char-kfd rw",
        "char-drm rw",
    ]
    assert set(service["RestrictAddressFamilies"].split()) == {
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK",
    }
    assert "ProtectProc" not in service and "ProcSubset" not in service  # other processes' /proc
    assert "PrivateDevices" not in service
    assert service["ProtectHome"] == "read-only"  # engines' logs may be under /home
    # No engine's log is in a store of secrets: out of the worker's sight.
    assert "-/etc/shadow" in service["InaccessiblePaths"].split()
    assert set(service["ReadWritePaths"].split()) == {"/var/lib/placewatch", "/run/placewatch"}
    for key in (
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectKernelTunables",
        "ProtectControlGroups",
        "RestrictNamespaces",
        "LockPersonality",
        "MemoryDenyWriteExecute",
    ):
        assert service[key] == "yes", key
    assert service["ProtectSystem"] == "strict"
    assert values(WORKER, "SystemCallFilter")[0] == "@system-service"
    assert service["SupplementaryGroups"] == "systemd-journal"  # services' output, journal/


def test_the_alerts_unit_runs_alerts_with_nothing_of_the_node() -> None:
    service = unit(ALERTS)["Service"]
    assert service["ExecStart"] == "/opt/placewatch/bin/placewatch alerts $ALERTS_FLAGS"
    assert service["RestartPreventExitStatus"] == str(EXIT_CONFIG)
    assert service["DynamicUser"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["PrivateDevices"] == "yes"
    assert service["ProtectProc"] == "invisible"
    # ALERTS_FLAGS is outside PLACEWATCH_*, which every command checks against its settings.
    assert not "ALERTS_FLAGS".startswith("PLACEWATCH_")
    for line in service["Environment"].split():
        name = line.split("=")[0]
        assert name in {env_name(f) for f in FIELDS} | {ENV_CONFIG}, name


def test_the_exporter_unit_serves_the_fleet_with_nothing_of_the_node() -> None:
    service = unit(EXPORTER)["Service"]
    assert service["ExecStart"] == "/opt/placewatch/bin/placewatch exporter $EXPORTER_FLAGS"
    assert service["RestartPreventExitStatus"] == str(EXIT_CONFIG)
    assert service["DynamicUser"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["PrivateDevices"] == "yes"
    assert "AF_INET" in service["RestrictAddressFamilies"].split()
    assert not "EXPORTER_FLAGS".startswith("PLACEWATCH_")


def test_the_forget_unit_forgets_nodes_silent_for_a_day_once_a_day() -> None:
    service = unit(FORGET)["Service"]
    assert service["Type"] == "oneshot"
    assert service["ExecStart"] == (
        "/opt/placewatch/bin/placewatch forget --silent-for ${FORGET_SILENT_FOR}"
    )
    assert values(FORGET, "Environment") == ["FORGET_SILENT_FOR=1d"]
    assert duration("1d") == 86400  # the default is a duration forget takes
    assert not "FORGET_SILENT_FOR".startswith("PLACEWATCH_")
    assert service["DynamicUser"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    timer = unit(FORGET_TIMER)["Timer"]
    assert (timer["OnCalendar"], timer["Persistent"]) == ("daily", "true")
    assert unit(FORGET_TIMER)["Install"]["WantedBy"] == "timers.target"


def exposure(path: Path) -> float:
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+) ", done.stdout)
    assert found, done.stdout[-2000:] + done.stderr
    return float(found.group(1))


@needs_analyze
@pytest.mark.parametrize("path", [WORKER, ALERTS, FORGET, EXPORTER], ids=lambda p: p.name)
def test_a_unit_s_exposure_is_at_most_five(path: Path) -> None:
    assert exposure(path) <= MOST_EXPOSURE


@needs_analyze
def test_the_exposure_check_tells_a_bare_unit_from_a_hardened_one(tmp_path: Path) -> None:
    bare = tmp_path / "bare.service"
    bare.write_text("[Service]\nExecStart=/bin/true\n")
    assert exposure(bare) > 9.0
    assert exposure(WORKER) < 3.0  # 2.6 with systemd 252: said so in the unit's comment
    assert "rates it 2.6 OK" in WORKER.read_text()


@needs_analyze
@pytest.mark.parametrize(
    "paths",
    [[WORKER], [ALERTS], [EXPORTER], [FORGET, FORGET_TIMER]],
    ids=lambda p: p[-1].name,
)
def test_a_unit_has_no_unknown_keys(paths: list[Path], tmp_path: Path) -> None:
    # verify wants ExecStart to exist; the rest of the unit is checked as written. A timer is
    # checked beside the service it starts.
    copies = [tmp_path / path.name for path in paths]
    for path, copy in zip(paths, copies, strict=True):
        copy.write_text(path.read_text().replace("/opt/placewatch/bin/placewatch", "/bin/true"))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, copies)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
