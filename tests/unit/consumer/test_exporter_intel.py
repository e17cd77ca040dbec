"""An Intel GPU's readings under intel/xpumanager's exporter names (placewatch/prometheus/
xpum.py), beside an NVIDIA GPU's DCGM names on the same node, in the worker's /metrics and
the fleet exporter's alike (one Families builds both)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from placewatch.prometheus.exposition import render
from placewatch.prometheus.families import Families
from placewatch.prometheus.metrics import served
from placewatch.prometheus.xpum import xpum_names
from placewatch.schemas import GpuSample, NodeSample, lean

from tests.support.held import NOW, node_sample

MiB = 1 << 20

MAX = GpuSample(
    index=1,
    vendor="intel",
    uuid="00000000-0000-0029-0000-002f0bd58086",
    name="Intel(R) Data Center GPU Max 1550",
    bus_id="0000:29:00.0",
    utilization_pct=99.5,
    activity="busy",
    memory_total_bytes=131072 * MiB,
    memory_used_bytes=98304 * MiB,
    memory_free_bytes=32768 * MiB,
    temperature_c=61.0,
    memory_temperature_c=58.0,
    power_w=419.61,
    energy_j=1843107.25,
    sm_clock_mhz=1600,
    memory_util_pct=42.0,
)


def mixed() -> NodeSample:
    s = node_sample("gpu-09", NOW - timedelta(seconds=1))
    return msgspec.structs.replace(s, gpus=[s.gpus[0], MAX])


def samples(text: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    """(metric, gpu) -> (labels, value) of every GPU series."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "gpu" in s.labels:
                key = (s.name, s.labels["gpu"] + s.labels.get("location", ""))
                found[key] = (s.labels, s.value)
    return found


def served_text(s: NodeSample) -> str:
    families = Families()
    families.add(lean.split(s)[1], s, 1.0)
    return render(families, openmetrics=True).decode()


def test_an_intel_gpu_reads_under_xpumanagers_names_units_and_labels() -> None:
    got = samples(served_text(mixed()))
    assert got[("xpum_engine_ratio", "1")][1] == 0.995
    assert got[("xpum_power_watts", "1")][1] == 419.61
    assert got[("xpum_energy_joules", "1")][1] == 1843107.25
    assert got[("xpum_memory_used_bytes", "1")][1] == 98304 * MiB
    assert got[("xpum_memory_bandwidth_ratio", "1")][1] == 0.42
    assert got[("xpum_temperature_celsius", "1gpu")][1] == 61.0
    assert got[("xpum_temperature_celsius", "1mem")][1] == 58.0
    labels, value = got[("xpum_frequency_mhz", "1gpu")]
    assert value == 1600
    assert (labels["location"], labels["type"], labels["Hostname"]) == ("gpu", "actual", "gpu-09")
    assert labels["pci_bus_id"] == "0000:29:00.0"


def test_the_intel_gpu_has_no_dcgm_twin_of_a_renamed_reading_and_keeps_the_rest() -> None:
    got = samples(served_text(mixed()))
    assert ("DCGM_FI_DEV_GPU_UTIL", "1") not in got
    assert ("DCGM_FI_DEV_POWER_USAGE", "1") not in got
    assert got[("DCGM_FI_DEV_FB_FREE", "1")][1] == 32768  # xpumanager serves no free memory
    assert got[("DCGM_FI_DEV_GPU_UTIL", "0")][1] == 37.0  # the NVIDIA GPU beside it
    assert ("xpum_power_watts", "0") not in got


def test_a_node_without_intel_gpus_serves_no_xpum_family() -> None:
    text = served_text(node_sample("gpu-07", NOW - timedelta(seconds=1)))
    assert "xpum_" not in text
    assert set(xpum_names()) <= set(served())
