"""amd-smi: every JSON shape across versions and processes (the source as it runs the tool
is tests/integration/gpu/amd_smi/test_amd_smi.py).

Real captures in ../shared/corpus/amd-smi-json (`amd-smi xgmi -m --json`, 8x MI300X); the
project's own fixtures for the metric and process JSON, which the corpus lacks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.schemas import GpuHealth, GpuSample
from placewatch.worker.gpu.amd_smi import (
    attach_amd_smi_processes,
    parse_amd_smi,
    parse_amd_smi_processes,
)
from placewatch.worker.gpu.health import assess

from tests.conftest import CORPUS, FIXTURES, corpus_files, examples, needs_corpus
from tests.support.amd_readings import assert_sane

MiB = 1 << 20
GiB = 1 << 30
OWN = FIXTURES / "amd-smi"


def test_newest_nested_value_wrapped_metric() -> None:
    busy, idle = parse_amd_smi((OWN / "mi300x-metric.json").read_text())
    # amd-smi metric prints no power cap: the busy percentage is all there is.
    assert (busy.index, busy.utilization_pct, busy.activity) == (0, 100, "busy")
    assert (busy.power_w, busy.power_cap_w) == (159.0, None)
    assert (busy.temperature_c, busy.temperature_sensor) == (52.0, "junction")
    assert busy.memory_total_bytes == 196592 * MiB
    assert busy.memory_used_bytes == 98587 * MiB
    assert busy.memory_free_bytes == 98005 * MiB
    assert busy.vendor == "amd"
    assert (busy.name, busy.uuid, busy.bus_id) == (None, None, None)
    assert (idle.index, idle.utilization_pct, idle.activity, idle.power_w) == (1, 0, "busy", 131)
    assert (idle.temperature_c, idle.memory_used_bytes) == (37.0, 283 * MiB)


def test_metric_blocks_give_clocks_memory_busy_energy_and_ecc() -> None:
    busy, idle = parse_amd_smi((OWN / "mi300x-metric.json").read_text())
    assert (busy.sm_clock_mhz, busy.memory_clock_mhz, busy.memory_util_pct) == (2100, 1300, 37)
    assert busy.energy_j == 15487322.125
    assert busy.fan_pct is None  # MI300X has no fan: every fan reading is N/A
    assert busy.health == GpuHealth(ecc_corrected_volatile=0, ecc_uncorrected_volatile=0)
    assert (idle.sm_clock_mhz, idle.memory_clock_mhz, idle.energy_j) == (132, 900, 12648636.191)
    assert idle.health == GpuHealth(ecc_corrected_volatile=12, ecc_uncorrected_volatile=1)


def test_an_uncorrected_ecc_error_makes_the_amd_gpu_unhealthy() -> None:
    busy, idle = (assess(g) for g in parse_amd_smi((OWN / "mi300x-metric.json").read_text()))
    assert busy.health is not None and (busy.health.healthy, busy.health.problems) == (True, [])
    assert idle.health is not None and idle.health.healthy is False
    assert idle.health.problems == [
        "1 uncorrected ECC error(s) since the amdgpu driver loaded: drain the GPU, then reset "
        "it (amd-smi reset -G) or reboot; the count clears when the driver loads again"
    ]


def test_full_metric_gives_pcie_link_fan_and_throttling() -> None:
    (gpu,) = parse_amd_smi((OWN / "rx7900xtx-metric-full.json").read_text())
    assert gpu.health == GpuHealth(
        clock_events=["throttled"], pcie_gen=4, pcie_width=16, pcie_replays=3
    )  # ECC prints N/A on a consumer card: null, not 0
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.memory_util_pct) == (2405, 1249, 22)
    assert (gpu.fan_pct, gpu.energy_j) == (56.08, 842113.52)


@pytest.mark.parametrize(
    ("gts", "generation"),
    [(2.5, 1), (5, 2), (8, 3), (16, 4), (32, 5), (64, 6), ("32 GT/s", 5), (12, None),
     ("N/A", None)],
)  # fmt: skip
def test_pcie_speed_in_gt_s_is_its_generation(gts: object, generation: int | None) -> None:
    (gpu,) = parse_amd_smi(json.dumps([{"gpu": 0, "pcie": {"width": 8, "speed": gts}}]))
    assert gpu.health is not None
    assert (gpu.health.pcie_gen, gpu.health.pcie_width) == (generation, 8)


def test_rocm_6_0_names_of_ecc_pcie_and_clocks() -> None:
    rocm60 = [{"gpu": 0,
               "clock": {"gfx": {"cur_clk": 1700, "min_clk": 500}, "MEM": {"cur_clk": 1600}},
               "ecc": {"total_correctable": 4, "total_uncorrectable": 0},
               "pcie": {"current_lanes": 16, "current_speed": 32, "replay_count": 7},
               "energy": {"total_energy_consumption": 1234.5}}]  # fmt: skip
    (gpu,) = parse_amd_smi(json.dumps(rocm60))
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.energy_j) == (1700, 1600, 1234.5)
    assert gpu.health == GpuHealth(
        ecc_corrected_volatile=4, ecc_uncorrected_volatile=0, pcie_gen=5, pcie_width=16,
        pcie_replays=7,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "events"),
    [("UNTHROTTLED", []), ("THROTTLED", ["throttled"]), (["PPT", "THERMAL", "PPT"], ["ppt", "thermal"]),
     ("N/A", None), (None, None)],
)  # fmt: skip
def test_throttle_status_is_clock_events_as_the_tool_names_them(
    status: object, events: list[str] | None
) -> None:
    (gpu,) = parse_amd_smi(json.dumps([{"gpu": 0, "power": {"throttle_status": status}}]))
    assert (gpu.health and gpu.health.clock_events) == (None if events is None else events)
    if events is None:
        assert gpu.health is None  # nothing of its health was read


def test_energy_units() -> None:
    def energy(reading: object) -> float | None:
        item = {"gpu": 0, "energy": {"total_energy_consumption": reading}}
        return parse_amd_smi(json.dumps([item]))[0].energy_j

    assert energy({"value": 5.5, "unit": "J"}) == 5.5
    assert energy({"value": 5_500_000, "unit": "uJ"}) == 5.5
    assert energy({"value": 5, "unit": "kWh"}) is None
    assert energy(-1) is None
    assert energy("N/A") is None


EXPECTED_SHAPE = dict(util=72, activity="busy", power=300.0, temp=61.0, sensor="edge",
                      total=64 * GiB, used=GiB, free=63 * GiB)  # fmt: skip

READINGS: dict[str, dict[str, Any]] = {
    "nested, value-wrapped": {
        "usage": {"gfx_activity": {"value": 72, "unit": "%"}},
        "power": {"socket_power": {"value": 300, "unit": "W"}},
        "temperature": {"edge": {"value": 61, "unit": "C"}, "hotspot": {"value": 70, "unit": "C"}},
        "mem_usage": {
            "total_vram": {"value": 65536, "unit": "MB"},
            "used_vram": {"value": 1024, "unit": "MB"},
        },
    },
    "nested, bare": {
        "usage": {"gfx_activity": 72},
        "power": {"socket_power": 300},
        "temperature": {"edge": 61, "hotspot": 70},
        "mem_usage": {"total_vram": 65536, "used_vram": 1024},
    },
    "nested, strings with units": {
        "usage": {"gfx_activity": "72 %"},
        "power": {"average_socket_power": "300 W"},
        "temperature": {"edge": "61 \N{DEGREE SIGN}C"},
        "mem_usage": {"total_vram": "64 GB", "used_vram": "1024 MB"},
    },
    "flat": {"gfx_activity": 72, "socket_power": 300.0, "edge": 61, "hotspot": 70,
             "total_vram": 65536, "used_vram": 1024},
}  # fmt: skip
WRAPPERS: dict[str, Callable[[list[dict[str, Any]]], object]] = {
    "list": lambda items: items,
    "gpu": lambda items: {"gpu": items},
    "gpu_data": lambda items: {"gpu_data": items},
    "lone object": lambda items: items[0],
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("shape", sorted(READINGS))
def test_every_shape_gives_the_same_readings(shape: str, wrapper: str) -> None:
    document = WRAPPERS[wrapper]([{"gpu": 0, **READINGS[shape]}])
    (gpu,) = parse_amd_smi(json.dumps(document))
    got = dict(util=gpu.utilization_pct, activity=gpu.activity, power=gpu.power_w,
               temp=gpu.temperature_c, sensor=gpu.temperature_sensor,
               total=gpu.memory_total_bytes, used=gpu.memory_used_bytes,
               free=gpu.memory_free_bytes)  # fmt: skip
    assert got == EXPECTED_SHAPE


def metric_with_limit(limit: dict[str, Any]) -> str:
    """A metric GPU merged with `amd-smi static --limit`, as a source holding both would."""
    return json.dumps(
        {
            "gpu_data": [
                {
                    "gpu": 0,
                    "usage": {"gfx_activity": {"value": 100, "unit": "%"}},
                    "power": {"socket_power": {"value": 159, "unit": "W"}},
                    "limit": limit,
                }
            ]
        }
    )


def W(watts: float) -> dict[str, Any]:
    return {"value": watts, "unit": "W"}


@pytest.mark.parametrize(
    "limit",
    [
        # ROCm 6.x-7.1: socket_power is the cap in force, max_power the most it may be set to.
        {"max_power": W(1000), "min_power": W(0), "socket_power": W(750)},
        # ROCm 7.2: per power-tracking limit.
        {"ppt0": {"max_power_limit": W(1000), "min_power_limit": W(0),
                  "socket_power_limit": W(750)},
         "ppt1": {"max_power_limit": "N/A", "min_power_limit": "N/A",
                  "socket_power_limit": "N/A"}},
    ],
    ids=["rocm6-limit", "rocm7.2-ppt0"],
)  # fmt: skip
def test_power_share_is_preferred_where_a_cap_is_present(limit: dict[str, Any]) -> None:
    (gpu,) = parse_amd_smi(metric_with_limit(limit))
    assert (gpu.utilization_pct, gpu.activity) == (21, "power")
    assert (gpu.power_w, gpu.power_cap_w) == (159.0, 750.0)


def test_a_zero_cap_falls_back_to_busy() -> None:
    (gpu,) = parse_amd_smi(metric_with_limit({"max_power": W(550), "socket_power": W(0)}))
    assert (gpu.utilization_pct, gpu.activity, gpu.power_cap_w) == (100, "busy", None)


@pytest.mark.parametrize(
    ("reading", "size"),
    [
        ({"value": 192, "unit": "GB"}, 192 * GiB),
        ({"value": 196592, "unit": "MiB"}, 196592 * MiB),
        ({"value": 196592, "unit": "MB"}, 196592 * MiB),
        ({"value": 1073741824, "unit": "B"}, GiB),
        ("196592 MB", 196592 * MiB),
        (196592, 196592 * MiB),
        ({"value": 5, "unit": "furlongs"}, None),
        ("N/A", None),
    ],
)
def test_vram_units(reading: object, size: int | None) -> None:
    (gpu,) = parse_amd_smi(json.dumps([{"gpu": 0, "mem_usage": {"total_vram": reading}}]))
    assert gpu.memory_total_bytes == size


def test_index_is_the_top_level_gpu_key_only() -> None:
    document = [
        {"gpu": 3, "link_metrics": {"links": [{"gpu": 0, "bdf": "0000:0c:00.0"}]}},
        {"gpu": -1, "usage": {"gfx_activity": 5}},
        {"usage": {"gfx_activity": 9}},
        {"gpu": "1", "usage": {"gfx_activity": 7}},
        {"gpu": 3, "usage": {"gfx_activity": 8}},
    ]
    gpus = parse_amd_smi(json.dumps(document))
    # The one without a "gpu" key is third in the list: index 2.
    assert [(g.index, g.utilization_pct) for g in gpus] == [(1, 7), (2, 9), (3, None)]


def test_static_and_list_output_give_name_bus_id_uuid_and_size() -> None:
    static = {"gpu_data": [{
        "gpu": 0,
        "asic": {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002",
                 "device_id": "0x74a1", "target_graphics_version": "gfx942"},
        "bus": {"bdf": "0000:0c:00.0", "max_pcie_width": 16},
        "vram": {"type": "HBM3", "vendor": "N/A", "size": {"value": 196592, "unit": "MB"}},
    }]}  # fmt: skip
    (gpu,) = parse_amd_smi(json.dumps(static))
    assert (gpu.name, gpu.bus_id, gpu.memory_total_bytes) == (
        "AMD Instinct MI300X", "0000:0c:00.0", 196592 * MiB,
    )  # fmt: skip
    listed = [{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "7eff74a0-0000-1000-808f-7e20764e2714",
               "kfd_id": 41416, "node_id": 2, "partition_id": 0}]  # fmt: skip
    (gpu,) = parse_amd_smi(json.dumps(listed))
    assert (gpu.bus_id, gpu.uuid) == ("0000:0c:00.0", "7eff74a0-0000-1000-808f-7e20764e2714")


@pytest.mark.parametrize(
    "text", ["", "No AMD GPUs found\n", "{}", "[]", '{"gpu_data": "N/A"}', "[1, 2]", "[" * 50_000]
)
def test_bad_output_gives_no_gpus_and_does_not_raise(text: str) -> None:
    assert parse_amd_smi(text) == []
    assert parse_amd_smi_processes(text) == []


def test_process_listing_fixture() -> None:
    processes = parse_amd_smi_processes((OWN / "mi300x-process.json").read_text())
    # GPU 1 prints "No running processes detected": no entry.
    assert processes == [
        (0, 4242, 96 * GiB, "llama-server"),
        (0, 4317, 0, "python3"),
    ]


def test_process_listing_in_later_and_older_shapes() -> None:
    later = {"gpu_data": [{"gpu": 0, "process_list": [
        {"name": "vllm", "pid": 12345, "memory_usage": {"vram_mem": {"value": 4096, "unit": "MB"}}},
        {"name": "no-pid", "memory_usage": {"vram_mem": {"value": 1, "unit": "MB"}}},
    ]}]}  # fmt: skip
    assert parse_amd_smi_processes(json.dumps(later)) == [(0, 12345, 4096 * MiB, "vllm")]
    older = [
        {"gpu": 2, "process_list": [{"process_info": {"name": "N/A", "pid": "77",
                                                       "mem_usage": "12.5 MB"}}]},
        {"gpu": 3, "process_list": "N/A"},
        {"gpu": 4, "processes": [{"pid": 99, "memory_usage": "N/A"}]},
    ]  # fmt: skip
    assert parse_amd_smi_processes(json.dumps(older)) == [
        (2, 77, 12.5 * MiB, None),
        (4, 99, None, None),
    ]


def test_processes_attach_by_index_without_the_zero_byte_openers() -> None:
    gpus = parse_amd_smi((OWN / "mi300x-metric.json").read_text())
    processes = parse_amd_smi_processes((OWN / "mi300x-process.json").read_text())
    busy, idle = attach_amd_smi_processes(gpus, [*processes, (7, 1, GiB, "elsewhere")])
    assert [(p.pid, p.used_bytes, p.name) for p in busy.processes] == [
        (4242, 96 * GiB, "llama-server")
    ]
    assert idle.processes == []


# What each real capture says, read by hand from the file.
XGMI_BUSES = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0",
              "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0"]  # fmt: skip
JSON_CAPTURES: dict[str, list[str]] = {
    # `amd-smi xgmi -m --json`, 8x MI300X: a link matrix; each item's own gpu and bdf
    # are the GPU, the bdfs in its "links" are its peers.
    "virtualclient-mi300x-8gpu-xgmi.json": XGMI_BUSES,
}


@needs_corpus
def test_every_amd_smi_capture_has_expected_values() -> None:
    assert {p.name for p in corpus_files("amd-smi-json")} == set(JSON_CAPTURES)


@needs_corpus
@pytest.mark.parametrize("name", sorted(JSON_CAPTURES))
def test_amd_smi_json_capture(name: str) -> None:
    gpus = parse_amd_smi((CORPUS / "amd-smi-json" / name).read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert [g.bus_id for g in gpus] == JSON_CAPTURES[name]
    # A link matrix has no readings: none are made up.
    for gpu in gpus:
        assert (gpu.utilization_pct, gpu.activity, gpu.power_w, gpu.temperature_c) == (
            None, None, None, None,
        )  # fmt: skip
        assert (gpu.memory_total_bytes, gpu.memory_used_bytes) == (None, None)
    assert parse_amd_smi_processes((CORPUS / "amd-smi-json" / name).read_text()) == []


# Structured fuzzing with the real key names and units.
AMD_KEYS = [
    "gpu", "gpu_data", "usage", "power", "temperature", "mem_usage", "limit", "ppt0", "vram",
    "asic", "bus", "board", "gfx_activity", "socket_power", "current_socket_power",
    "average_socket_power", "power_limit", "power_cap", "socket_power_limit", "max_power",
    "edge", "hotspot", "mem", "total_vram", "used_vram", "free_vram", "size", "market_name",
    "bdf", "uuid", "value", "unit", "process_list", "process_info", "processes", "pid",
    "name", "memory_usage", "vram_mem", "link_metrics", "links",
    "clock", "gfx_0", "gfx", "mem_0", "MEM", "clk", "cur_clk", "gfx_0_clk", "mem_0_clk",
    "umc_activity", "energy", "total_energy_consumption", "fan", "rpm", "ecc",
    "total_correctable_count", "total_uncorrectable_count", "total_correctable",
    "total_uncorrectable", "pcie", "width", "speed", "current_lanes", "current_speed",
    "replay_count", "throttle_status",
]  # fmt: skip
amd_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["N/A", "MB", "MiB", "GB", "B", "%", "W", "C", "12 MB", "-1", "1e999",
                     "No running processes detected", "72 %", "0000:0c:00.0", "J", "uJ",
                     "GT/s", "MHz", "32", "2.5", "THROTTLED", "UNTHROTTLED", "1e30"]),
)  # fmt: skip
amd_values = st.recursive(
    amd_leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(AMD_KEYS), inner, max_size=4)
    ),
    max_leaves=14,
)
gpu_items = st.dictionaries(st.sampled_from(AMD_KEYS), amd_values, max_size=6)
amd_documents = st.one_of(
    st.lists(gpu_items | amd_values, max_size=3),
    st.dictionaries(st.sampled_from(["gpu_data", "gpu"]), st.lists(gpu_items, max_size=3)),
    amd_values,
)


def assert_sane_processes(processes: list[tuple[int, int, int | None, str | None]]) -> None:
    for index, pid, vram, name in processes:
        assert index >= 0 and pid > 0
        assert vram is None or vram >= 0
        assert name is None or name.strip()


@settings(max_examples=examples(300), deadline=None)
@given(amd_documents)
def test_any_json_document_parses_to_sane_values(document: Any) -> None:
    text = json.dumps(document)
    gpus = parse_amd_smi(text)
    assert_sane(gpus)
    processes = parse_amd_smi_processes(text)
    assert_sane_processes(processes)
    for gpu in attach_amd_smi_processes(gpus, processes):
        msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSample)


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    assert_sane(parse_amd_smi(text))
    assert_sane_processes(parse_amd_smi_processes(text))
