"""The recovery the NVIDIA driver asks for, as NVML and nvidia-smi say it."""

from __future__ import annotations

import pytest

from placewatch.worker.gpu import recovery
from placewatch.worker.gpu.nvidia_smi.query_csv import parse_gpus
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml

from tests.conftest import CORPUS, FIXTURES, needs_corpus


@pytest.mark.parametrize(
    ("words", "action"),
    [
        ("None", "none"),
        ("Reset", "reset"),
        ("Drain P2P", "drain_p2p"),
        ("Drain and Reset", "drain_and_reset"),
        ("[N/A]", None),
        ("N/A", None),
        ("Requested functionality has been deprecated", None),
        ("", None),
        (None, None),
    ],
)
def test_nvidia_smi_s_words(words: str | None, action: str | None) -> None:
    assert recovery.from_words(words) == action


def test_nvml_s_codes() -> None:
    assert [recovery.from_code(c) for c in range(8)] == [
        "none",
        "reset",
        "reboot",
        "drain_p2p",
        "drain_and_reset",
        "recover_imex_domain",
        "bus_reset",
        "system_reboot",
    ]
    assert recovery.from_code(9) == "action_9"  # a newer driver's: named by its number
    assert recovery.from_code(-1) is None and recovery.from_code(None) is None


@pytest.mark.parametrize(
    ("reset", "drain", "action"),
    [
        (False, False, "none"),
        (False, None, "none"),
        (True, False, "reset"),
        (True, True, "drain_and_reset"),
        (None, None, None),
    ],
)
def test_the_flags_of_drivers_before_r570(
    reset: bool | None, drain: bool | None, action: str | None
) -> None:
    assert recovery.from_flags(reset, drain) == action


def test_own_h200_capture_asks_for_no_recovery() -> None:
    (gpu,) = parse_xml((FIXTURES / "nvidia-smi" / "h200-q.xml").read_text())
    assert gpu.health is not None and gpu.health.recovery_action == "none"


def test_a_reset_required_flag_is_a_reset() -> None:
    """Constructed after the v12 layout (nvidia-smi 535: <gpu_reset_status>)."""
    xml = (
        "<nvidia_smi_log><gpu id='00000000:07:00.0'><minor_number>0</minor_number>"
        "<gpu_reset_status><reset_required>Yes</reset_required>"
        "<drain_and_reset_recommended>No</drain_and_reset_recommended></gpu_reset_status>"
        "</gpu></nvidia_smi_log>"
    )
    (gpu,) = parse_xml(xml)
    assert gpu.health is not None and gpu.health.recovery_action == "reset"


def test_a_csv_with_the_recovery_column_reads_it() -> None:
    """The column is read where a table has it (R570 and later); the worker's query does not
    ask for it, which older drivers would refuse whole."""
    table = "index, uuid, memory.used [MiB], gpu_recovery_action\n0, GPU-1, 10, Drain and Reset\n"
    (gpu,) = parse_gpus(table)
    assert gpu.health is not None and gpu.health.recovery_action == "drain_and_reset"


@needs_corpus
@pytest.mark.parametrize(
    ("name", "action"),
    [
        ("telegraf-a100-sxm4-80gb-mig-drv535.54.03-v12.xml", "none"),  # No, No
        ("netdata-rtx-4090-drv535.86.05-v12.xml", "none"),  # No, N/A
        ("telegraf-rtx-3060-drv570.124.04-v12.xml", "none"),  # flags deprecated, action None
        ("telegraf-rtx-4000-sff-ada-drv595.84-v13.xml", "none"),
        ("netdata-tesla-p100-pcie-16gb-drv510.47.03-v11.xml", None),  # neither printed
    ],
)
def test_xml_captures(name: str, action: str | None) -> None:
    gpus = parse_xml((CORPUS / "nvidia-smi-xml" / name).read_text())
    assert [None if g.health is None else g.health.recovery_action for g in gpus] == [action]


@needs_corpus
def test_csv_capture_of_driver_590() -> None:
    path = "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv"
    (gpu,) = parse_gpus((CORPUS / "nvidia-smi-csv" / path).read_text())
    assert gpu.health is not None and gpu.health.recovery_action == "none"
