"""xpu-smi's discovery and dump, from captures built on intel/xpumanager v1.3.7 and v2.0.0
(tests/fixtures/xpu-smi/README.md): every value read, N/A missing, bad text no raise."""

from __future__ import annotations

import pytest

from placewatch.worker.gpu.xpu_smi import intel_sample
from placewatch.worker.gpu.xpu_smi.parse import (
    XpuDevice,
    XpuProperties,
    parse_discovery,
    parse_dump,
    parse_properties,
    tool_error,
)

from tests.conftest import FIXTURES

OWN = FIXTURES / "xpu-smi"
MiB = 1 << 20
GiB = 1 << 30


def test_discovery_lists_the_physical_gpus_and_leaves_virtual_functions_out() -> None:
    devices = parse_discovery((OWN / "max1550-discovery.json").read_text())
    assert devices == [
        XpuDevice(
            0,
            "Intel(R) Data Center GPU Max 1550",
            "00000000-0000-0029-0000-002f0bd58086",
            "0000:29:00.0",
            "/dev/dri/card1",
        ),
        XpuDevice(
            1,
            "Intel(R) Data Center GPU Max 1550",
            "00000000-0000-003a-0000-002f0bd58086",
            "0000:3a:00.0",
            "/dev/dri/card2",
        ),
    ]


def test_properties_give_the_memory_size_the_driver_and_the_firmware() -> None:
    props = parse_properties((OWN / "max1550-discovery-0.json").read_text())
    assert props == XpuProperties(128 * GiB, "I915_23.10.32_PSB_230816.32", "normal")


def test_dump_of_1_3_reads_every_column_by_its_description() -> None:
    dump = parse_dump((OWN / "max1550-dump.csv").read_text())
    assert dump[0] == {
        "utilization_pct": 99.55,
        "power_w": 419.61,
        "sm_clock_mhz": 1600,
        "temperature_c": 61.0,
        "memory_temperature_c": 58.0,
        "memory_util_pct": 42.17,
        "energy_j": 1843107.25,
        "memory_used_mib": 98304.5,
    }
    assert "memory_temperature_c" not in dump[1]  # N/A: no reading, not 0
    assert dump[1]["sm_clock_mhz"] == 0  # an idle GT at 0 MHz is a reading


def test_dump_of_2_0_reads_the_query_names_in_aligned_columns() -> None:
    dump = parse_dump((OWN / "flex170-dump-2.0.csv").read_text())
    assert dump == {
        0: {
            "utilization_pct": 37.0,
            "power_w": 88.41,
            "sm_clock_mhz": 2050,
            "temperature_c": 54.0,
            "memory_util_pct": 12.0,
            "energy_j": 72104.88,
            "memory_used_mib": 6144.0,
        }
    }


def test_a_sample_joins_discovery_properties_and_dump() -> None:
    device = parse_discovery((OWN / "max1550-discovery.json").read_text())[0]
    props = parse_properties((OWN / "max1550-discovery-0.json").read_text())
    g = intel_sample(device, props, parse_dump((OWN / "max1550-dump.csv").read_text())[0])
    assert (g.vendor, g.index, g.bus_id, g.activity) == ("intel", 0, "0000:29:00.0", "busy")
    assert g.memory_used_bytes == int(98304.5 * MiB)
    assert g.memory_free_bytes == 128 * GiB - int(98304.5 * MiB)
    assert (g.utilization_pct, g.power_w, g.energy_j) == (99.55, 419.61, 1843107.25)
    assert g.power_cap_w is None  # xpu-smi's dump prints none


def test_a_sample_without_a_size_has_no_free_memory() -> None:
    g = intel_sample(XpuDevice(3, None, None, None, None), XpuProperties(), {"memory_used_mib": 2})
    assert (g.memory_used_bytes, g.memory_free_bytes, g.utilization_pct) == (2 * MiB, None, None)
    assert g.activity is None


def test_a_level_zero_failure_is_the_tools_error() -> None:
    text = (OWN / "level-zero-error.json").read_text()
    assert tool_error(text) == "Level Zero Initialization Error"
    assert parse_discovery(text) == []
    assert parse_properties(text) == XpuProperties()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        '{"device_list": 3}',
        '{"device_list": [{"device_id": "x"}, 7, {"device_id": -1}]}',
        "Timestamp, DeviceId, GPU Power (W)\n1, x, 3\n1, 2\n",
        '{"memory_physical_size_byte": "-5"}',
    ],
)
def test_bad_text_is_no_reading_never_an_error(text: str) -> None:
    assert parse_discovery(text) == []
    assert parse_dump(text) == {}
    assert parse_properties(text).memory_total_bytes is None
