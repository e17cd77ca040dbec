"""A real H200 node's answers (tests/fixtures/nvidia-smi/h200-*): CSV, XML and NVML agree.

Captured with bench/nvidia_node.sh while two processes held 512 MiB each on the GPU
through tests/cuda_holder.py (1030 MiB each with their CUDA contexts).
"""

from __future__ import annotations

from types import SimpleNamespace

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.nvidia_smi.query_csv import (
    attach_processes,
    parse_compute_apps,
    parse_gpus,
    parse_table,
)
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml
from placewatch.worker.gpu.nvml import _memory

from tests.conftest import FIXTURES

MiB = 1 << 20
HERE = FIXTURES / "nvidia-smi"


def by_csv() -> GpuSample:
    (gpu,) = attach_processes(
        parse_gpus((HERE / "h200-query-gpu.csv").read_text()),
        parse_compute_apps((HERE / "h200-query-compute-apps.csv").read_text()),
    )
    return gpu


def test_the_csv_queries_read_the_h200_and_its_two_processes() -> None:
    gpu = by_csv()
    assert (gpu.index, gpu.name, gpu.bus_id) == (0, "NVIDIA H200", "00000000:00:06.0")
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000200"
    assert gpu.memory_total_bytes == 143771 * MiB
    assert (gpu.memory_used_bytes, gpu.memory_free_bytes) == (2075 * MiB, 141082 * MiB)
    assert (gpu.utilization_pct, gpu.activity, gpu.temperature_c) == (0, "busy", 37)
    assert (gpu.power_w, gpu.power_cap_w, gpu.mig_enabled) == (101.9, 700.0, False)
    assert sorted((p.pid, p.used_bytes) for p in gpu.processes) == [
        (488, 1030 * MiB),
        (492, 1030 * MiB),
    ]


def test_the_xml_of_the_same_moment_reads_the_same() -> None:
    csv, (xml,) = by_csv(), parse_xml((HERE / "h200-q.xml").read_text())
    same = ("index", "uuid", "name", "bus_id", "memory_total_bytes", "memory_used_bytes")
    assert [getattr(xml, f) for f in same] == [getattr(csv, f) for f in same]
    assert (xml.power_cap_w, xml.mig_enabled) == (csv.power_cap_w, False)
    assert sorted(p.pid for p in xml.processes) == sorted(p.pid for p in csv.processes)


def nvml_readings() -> dict[str, dict[str, int]]:
    """ "0 v1 total T used U free F; v2 total T reserved R used U free F" as
    {"v1": {...}, "v2": {...}}."""
    text = (HERE / "h200-nvml-memory.txt").read_text().split(" ", 1)[1]
    readings = {}
    for part in text.split(";"):
        label, *pairs = part.split()
        readings[label] = {k: int(v) for k, v in zip(pairs[::2], pairs[1::2], strict=True)}
    return readings


def test_nvmls_v2_reading_less_its_reserve_is_what_nvidia_smi_calls_used() -> None:
    # The driver's own two readings of that moment: v1 counts the reserve (615 MiB) as used.
    v1, v2 = nvml_readings()["v1"], nvml_readings()["v2"]
    assert v1["used"] - v2["used"] == v2["reserved"]
    columns, (row,) = parse_table((HERE / "h200-memory-reserved.csv").read_text())
    reserved = row[[c.name for c in columns].index("memory.reserved")]
    assert abs(v2["reserved"] - int(reserved) * MiB) < MiB  # nvidia-smi's, in whole MiB
    memory = _memory(SimpleNamespace(nvmlMemory_v2=2), None, lambda *_: SimpleNamespace(**v2))
    assert memory is not None
    assert abs(memory.used - 2075 * MiB) < MiB  # nvidia-smi's memory.used, in whole MiB
    assert abs(memory.free - 141082 * MiB) < MiB
    assert memory.total == v2["total"]
