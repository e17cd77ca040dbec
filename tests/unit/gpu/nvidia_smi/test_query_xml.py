"""nvidia-smi -q -x: the project's own fixtures, written by hand in the format of the real
captures (test_query_xml_captures.py reads those); missing values are None; never raises.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml

from tests.conftest import FIXTURES

MiB = 1 << 20
OWN = FIXTURES / "nvidia-smi"


# -- the project's own fixtures -------------------------------------------------------------


def test_mig_gpu_reports_instances_and_null_utilization() -> None:
    (gpu,) = parse_xml((OWN / "h100-mig-q.xml").read_text())
    assert gpu.index == 0
    assert gpu.vendor == "nvidia"
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-7c1e0b9a-4d2f-4b6e-9a31-5e8d2f0c6a14"
    assert gpu.bus_id == "00000000:19:00.0"
    assert gpu.mig_enabled is True
    assert gpu.utilization_pct is None  # N/A in MIG mode: unknown, not idle
    assert gpu.activity is None
    assert gpu.memory_total_bytes == 81559 * MiB
    assert gpu.memory_used_bytes == 20350 * MiB
    assert gpu.memory_free_bytes == 60630 * MiB
    assert gpu.temperature_c == 41
    assert gpu.temperature_sensor is None
    assert gpu.power_w == 142.67
    assert gpu.power_cap_w == 700.0
    assert [(m.gpu_instance_id, m.compute_instance_id) for m in gpu.mig] == [(1, 0), (2, 0)]
    assert [(m.memory_total_bytes, m.memory_used_bytes) for m in gpu.mig] == [
        (40192 * MiB, 20311 * MiB),
        (40192 * MiB, 13 * MiB),
    ]
    # The XML names neither a MIG device's UUID nor its profile.
    assert all(m.uuid is None and m.profile is None for m in gpu.mig)
    assert [(p.pid, p.used_bytes, p.name) for p in gpu.processes] == [
        (31337, 20280 * MiB, "/opt/vllm/bin/python3")
    ]


def test_two_gpus_keep_document_order_and_their_processes() -> None:
    busy, idle = parse_xml((OWN / "l4x2-q.xml").read_text())
    assert (busy.index, idle.index) == (0, 1)
    assert (busy.bus_id, idle.bus_id) == ("00000000:01:00.0", "00000000:02:00.0")
    assert busy.name == idle.name == "NVIDIA L4"
    assert busy.uuid == "GPU-2b9d4e61-0c3a-4f7e-8d15-a6e93c7f0b42"
    assert idle.uuid == "GPU-8e07a3c5-61fd-4b28-93e0-1d5b7a94c2e6"
    assert busy.utilization_pct == 87
    assert busy.activity == "busy"
    assert busy.memory_total_bytes == 23034 * MiB
    assert busy.memory_used_bytes == 15200 * MiB
    assert busy.memory_free_bytes == 7400 * MiB
    assert busy.temperature_c == 63
    assert busy.power_cap_w == 72.0
    assert busy.mig_enabled is None  # N/A: the L4 has no MIG
    assert busy.mig == []
    assert [(p.pid, p.used_bytes, p.name) for p in busy.processes] == [
        (4242, 15000 * MiB, "/opt/llama.cpp/bin/llama-server"),
        (4317, 190 * MiB, "python3"),
    ]
    assert [(p.pid, p.used_bytes, p.name) for p in idle.processes] == [(5120, None, "python3")]


def test_missing_readings_are_null_and_keep_the_rest_of_the_gpu() -> None:
    _, idle = parse_xml((OWN / "l4x2-q.xml").read_text())
    assert idle.utilization_pct is None
    assert idle.activity is None
    assert idle.temperature_c is None
    assert idle.memory_used_bytes == 250 * MiB
    assert idle.memory_free_bytes == 22350 * MiB
    assert idle.power_cap_w == 72.0


def test_average_power_is_read_first_and_instant_is_the_fallback() -> None:
    busy, idle = parse_xml((OWN / "l4x2-q.xml").read_text())
    assert busy.power_w == 61.20  # average, as the CSV query's power.draw reports it
    assert idle.power_w == 16.48  # average is N/A there: instant


# -- single readings, written inline --------------------------------------------------------


@dataclass
class GpuXml:
    """One <gpu> to write: readings by path under <gpu>, lists for repeated elements."""

    readings: dict[str, str] = field(default_factory=dict)
    bus_id: str | None = None
    mig_devices: list[dict[str, str]] = field(default_factory=list)
    processes: list[dict[str, str]] = field(default_factory=list)


def _put(parent: ET.Element, path: str, value: str) -> None:
    node = parent
    for part in path.split("/"):
        child = node.find(part)
        node = child if child is not None else ET.SubElement(node, part)
    node.text = value


def document(gpus: list[GpuXml]) -> str:
    root = ET.Element("nvidia_smi_log")
    _put(root, "driver_version", "550.54.15")
    for spec in gpus:
        gpu = ET.SubElement(root, "gpu", {} if spec.bus_id is None else {"id": spec.bus_id})
        for path, value in spec.readings.items():
            _put(gpu, path, value)
        devices = ET.SubElement(gpu, "mig_devices")
        for readings in spec.mig_devices:
            device = ET.SubElement(devices, "mig_device")
            for path, value in readings.items():
                _put(device, path, value)
        processes = ET.SubElement(gpu, "processes")
        for readings in spec.processes:
            info = ET.SubElement(processes, "process_info")
            for path, value in readings.items():
                _put(info, path, value)
    return '<?xml version="1.0" ?>\n' + ET.tostring(root, encoding="unicode")


MISSING = [
    "N/A", "[N/A]", "Not Supported", "[Not Supported]",
    "Requested functionality has been deprecated",
    "[Requested functionality has been deprecated]", "[Insufficient Permissions]",
    "Unknown Error", "[Unknown Error]", "", "  ",
]  # fmt: skip


@pytest.mark.parametrize("missing", MISSING)
def test_every_spelling_of_missing_is_null_and_keeps_the_gpu(missing: str) -> None:
    spec = GpuXml(
        bus_id="00000000:00:1E.0",
        readings={
            "product_name": "Tesla T4",
            "uuid": missing,
            "mig_mode/current_mig": missing,
            "utilization/gpu_util": missing,
            "fb_memory_usage/total": "15360 MiB",
            "fb_memory_usage/used": missing,
            "fb_memory_usage/free": "13939 MiB",
            "temperature/gpu_temp": missing,
            "power_readings/power_draw": missing,
            "power_readings/enforced_power_limit": "70.00 W",
        },
        mig_devices=[{"gpu_instance_id": missing, "fb_memory_usage/total": missing}],
        processes=[{"pid": "675", "process_name": missing, "used_memory": missing}],
    )
    (gpu,) = parse_xml(document([spec]))
    assert gpu.uuid is None
    assert gpu.mig_enabled is None
    assert gpu.utilization_pct is None
    assert gpu.memory_used_bytes is None
    assert gpu.temperature_c is None
    assert gpu.power_w is None
    assert (gpu.name, gpu.bus_id) == ("Tesla T4", "00000000:00:1E.0")
    assert gpu.memory_total_bytes == 15360 * MiB
    assert gpu.memory_free_bytes == 13939 * MiB
    assert gpu.power_cap_w == 70.0
    (device,) = gpu.mig
    assert (device.gpu_instance_id, device.memory_total_bytes) == (None, None)
    (process,) = gpu.processes
    assert (process.pid, process.name, process.used_bytes) == (675, None, None)


@pytest.mark.parametrize(
    ("current", "expected"),
    [("Enabled", True), ("Disabled", False), ("N/A", None), (None, None)],
)
def test_mig_mode_is_true_false_or_unknown(current: str | None, expected: bool | None) -> None:
    readings = {} if current is None else {"mig_mode/current_mig": current}
    (gpu,) = parse_xml(document([GpuXml(readings=readings)]))
    assert gpu.mig_enabled is expected


def test_bus_id_falls_back_to_pci_bus_id_without_an_id_attribute() -> None:
    (gpu,) = parse_xml(document([GpuXml(readings={"pci/pci_bus_id": "00000000:43:00.0"})]))
    assert gpu.bus_id == "00000000:43:00.0"


def test_power_cap_falls_back_from_enforced_to_power_limit() -> None:
    spec = GpuXml(
        readings={
            "power_readings/enforced_power_limit": "N/A",
            "power_readings/power_limit": "125.00 W",
        }
    )
    (gpu,) = parse_xml(document([spec]))
    assert gpu.power_cap_w == 125.0


def test_process_without_a_pid_is_skipped_and_the_others_kept() -> None:
    spec = GpuXml(
        processes=[
            {"pid": "N/A", "used_memory": "10 MiB"},
            {"used_memory": "20 MiB"},
            {"pid": "-1", "used_memory": "30 MiB"},
            {"pid": "77", "used_memory": "40 MiB"},
        ]
    )
    (gpu,) = parse_xml(document([spec]))
    assert [(p.pid, p.used_bytes) for p in gpu.processes] == [(77, 40 * MiB)]


def test_empty_gpu_element_is_a_gpu_with_no_readings() -> None:
    gpus = parse_xml("<nvidia_smi_log><gpu/><gpu/></nvidia_smi_log>")
    assert gpus == [GpuSample(index=0), GpuSample(index=1)]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "No devices were found\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "<nvidia_smi_log><gpu><product_name>Tesla T4</product_name>",
        "<other><gpu/></other>",
        "<nvidia_smi_log>\ud800</nvidia_smi_log>",
        "garbage<<>>\x00\x01",
    ],
)
def test_bad_output_gives_no_gpus_and_does_not_raise(text: str) -> None:
    assert parse_xml(text) == []


def test_truncated_capture_gives_no_gpus() -> None:
    text = (OWN / "l4x2-q.xml").read_text()
    assert len(parse_xml(text)) == 2
    assert parse_xml(text[: len(text) // 2]) == []
    assert parse_xml(text[:-5]) == []


def test_huge_sizes_do_not_raise() -> None:
    spec = GpuXml(readings={"fb_memory_usage/total": "1e308 GiB", "fb_memory_usage/used": "1 GiB"})
    (gpu,) = parse_xml(document([spec]))
    assert gpu.memory_total_bytes is None
    assert gpu.memory_used_bytes == 1 << 30


# -- never raises, values stay in range -----------------------------------------------------


def assert_in_range(gpus: list[GpuSample]) -> None:
    for position, gpu in enumerate(gpus):
        assert gpu.index == position
        assert gpu.utilization_pct is None or 0 <= gpu.utilization_pct <= 100
        assert (gpu.activity == "busy") is (gpu.utilization_pct is not None)
        sizes = [gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes]
        sizes += [p.used_bytes for p in gpu.processes]
        sizes += [m.memory_total_bytes for m in gpu.mig] + [m.memory_used_bytes for m in gpu.mig]
        assert all(size is None or size >= 0 for size in sizes)
        assert all(p.pid >= 0 for p in gpu.processes)
        for reading in (gpu.temperature_c, gpu.power_w, gpu.power_cap_w):
            assert reading is None or math.isfinite(reading)
        # The wire types validate the same ranges on decode.
        assert msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSample) == gpu


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    assert_in_range(parse_xml(text))


@settings(deadline=None)
@given(st.text(), st.sampled_from(["<nvidia_smi_log>", "<nvidia_smi_log><gpu>", '<gpu id="']))
def test_text_after_an_xml_start_never_raises(tail: str, head: str) -> None:
    assert_in_range(parse_xml(head + tail))


# Text that XML 1.0 can carry: no control characters, surrogates or non-characters.
_XML_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Cn")), max_size=12
)
_NUMBERS = st.one_of(
    st.integers(-(10**6), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str),
    st.sampled_from(["1e308", "-0", "1e-320", "+5", ".5", "0x10", "1_000"]),
)
_VALUES = st.one_of(
    st.sampled_from([*MISSING, "Enabled", "Disabled", "None"]),
    st.tuples(
        _NUMBERS, st.sampled_from(["", " MiB", " GiB", " KiB", " %", " W", " C", " MHz"])
    ).map("".join),
    _XML_TEXT,
)
_GPU_PATHS = [
    "product_name", "uuid", "pci/pci_bus_id", "mig_mode/current_mig", "utilization/gpu_util",
    "fb_memory_usage/total", "fb_memory_usage/used", "fb_memory_usage/free",
    "temperature/gpu_temp", "power_readings/power_draw", "power_readings/power_limit",
    "power_readings/enforced_power_limit", "gpu_power_readings/power_draw",
    "gpu_power_readings/average_power_draw", "gpu_power_readings/instant_power_draw",
    "gpu_power_readings/current_power_limit", "module_power_readings/power_draw",
]  # fmt: skip
_MIG_PATHS = [
    "gpu_instance_id", "compute_instance_id", "uuid", "profile",
    "fb_memory_usage/total", "fb_memory_usage/used",
]  # fmt: skip
_PROCESS_PATHS = ["pid", "process_name", "used_memory", "gpu_instance_id", "type"]
_TAGS = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)


def _readings(paths: list[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.one_of(st.sampled_from(paths), _TAGS), _VALUES, max_size=len(paths))


_GPU_XML = st.builds(
    GpuXml,
    readings=_readings(_GPU_PATHS),
    bus_id=st.one_of(st.none(), _XML_TEXT),
    mig_devices=st.lists(_readings(_MIG_PATHS), max_size=3),
    processes=st.lists(_readings(_PROCESS_PATHS), max_size=3),
)


@settings(deadline=None)
@given(st.lists(_GPU_XML, max_size=4))
def test_random_readings_never_raise_and_stay_in_range(gpus: list[GpuXml]) -> None:
    parsed = parse_xml(document(gpus))
    assert len(parsed) == len(gpus)
    assert_in_range(parsed)
    for gpu, spec in zip(parsed, gpus, strict=True):
        assert len(gpu.mig) == len(spec.mig_devices)
        assert len(gpu.processes) <= len(spec.processes)
