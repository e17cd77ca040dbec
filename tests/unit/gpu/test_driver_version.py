"""The driver's version as each source reads it: nvidia-smi's `driver_version` (CSV column,
XML root), NVML's nvmlSystemGetDriverVersion, rocm-smi's `--showdriverversion`."""

from __future__ import annotations

import re

import pytest

from placewatch.worker.gpu.nvidia_smi import GPU_FIELDS
from placewatch.worker.gpu.nvidia_smi.query_csv import parse_gpus
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml
from placewatch.worker.gpu.nvml import read_gpus
from placewatch.worker.gpu.rocm_smi import ROCM_SMI_ARGS, parse_rocm_smi

from tests.conftest import FIXTURES, corpus_files
from tests.support.fake_nvml import FakeNvml, captured, h200

H200_DRIVER = "580.159.04"


def test_nvidia_smi_s_query_asks_for_it_and_reads_it_per_row() -> None:
    assert "driver_version" in GPU_FIELDS
    text = "index, name, driver_version, memory.used [MiB]\n0, NVIDIA H200, 580.159.04, 2075\n"
    (gpu,) = parse_gpus(text)
    assert gpu.driver_version == H200_DRIVER
    assert parse_gpus("index, memory.used [MiB]\n0, 2075\n")[0].driver_version is None


@pytest.mark.parametrize(
    "capture",
    [p for p in corpus_files("nvidia-smi-csv") if "-drv" in p.name and "query-gpu" in p.name],
    ids=lambda p: p.name,
)
def test_every_captured_query_with_the_column_reads_the_driver_in_its_name(capture) -> None:  # type: ignore[no-untyped-def]
    text = capture.read_text(errors="replace")
    if "driver_version" not in text.splitlines()[0]:
        pytest.skip(f"{capture.name} was not asked for driver_version")
    named = re.search(r"-drv(\d+\.\d+(?:\.\d+)?)", capture.name)
    assert named is not None
    gpus = parse_gpus(text)
    assert gpus and {g.driver_version for g in gpus} == {named[1]}


def test_the_xml_s_root_driver_is_every_gpu_s() -> None:
    (gpu,) = parse_xml((FIXTURES / "nvidia-smi" / "h200-q.xml").read_text())
    assert gpu.driver_version == H200_DRIVER
    for gpu in parse_xml((FIXTURES / "nvidia-smi" / "l4x2-q.xml").read_text()):
        assert gpu.driver_version is not None and re.fullmatch(
            r"\d+\.\d+(\.\d+)?", gpu.driver_version
        )


def test_nvml_asks_the_system_and_a_driver_that_refuses_leaves_it_unknown() -> None:
    (gpu,), _ = read_gpus(FakeNvml(h200()))
    assert gpu.driver_version == H200_DRIVER
    gpus, _ = read_gpus(FakeNvml(captured()))  # a capture without it: NOT_SUPPORTED
    assert [g.driver_version for g in gpus] == [None, None]


def test_rocm_smi_is_asked_for_it_and_its_system_entry_is_every_card_s() -> None:
    assert "--showdriverversion" in ROCM_SMI_ARGS
    gpus = parse_rocm_smi((FIXTURES / "rocm-smi" / "mi300x-style.json").read_text())
    assert gpus and {g.driver_version for g in gpus} == {"6.8.5"}
    assert parse_rocm_smi('{"card0": {"GPU use (%)": "3"}}')[0].driver_version is None
