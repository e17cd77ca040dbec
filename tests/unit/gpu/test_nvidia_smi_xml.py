"""nvidia-smi -q -x: every schema from v7 to v13, missing values are None, never raises.

Real captures in ../shared/corpus/nvidia-smi-xml (drivers 352.99 to 595.84,
see its PROVENANCE.md) and the project's own fixtures, written by hand in the
same format.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.gpu.nvidia_smi_xml import parse_xml
from placewatch.schemas import GpuSample

from tests.conftest import CORPUS, FIXTURES, corpus_files, needs_corpus

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


# -- real captures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Want:
    """One GPU as read by hand from a capture; sizes in MiB."""

    name: str
    uuid: str
    bus_id: str
    total: int
    used: int
    free: int
    util: float | None
    temp: float
    power: float | None
    cap: float | None
    mig: bool | None = None
    # (pid, MiB, first word of process_name)
    processes: tuple[tuple[int, int, str], ...] = ()
    # (gpu_instance_id, compute_instance_id, total MiB, used MiB)
    mig_devices: tuple[tuple[int, int, int, int], ...] = ()


XML_CAPTURES: dict[str, list[Want]] = {
    # Tesla V100-PCIE-32GB, driver 460.39, CUDA 11.2, v11 DTD: four processes.
    "datakit-tesla-v100-pcie-32gb-drv460.39-v11-processes.xml": [
        Want("Tesla V100-PCIE-32GB", "GPU-e77ce5d8-8b63-c936-3c1b-839d45bcd0f2",
             "00000000:21:01.0", 32510, 12311, 20199, util=91, temp=66, power=170.16, cap=250.0,
             processes=((4027538, 3214, "mtopen-plugin:worker"),
                        (4027590, 3288, "mtopen-plugin:worker"),
                        (4157880, 2912, "mtopen-plugin:worker"),
                        (4165319, 2890, "mtopen-plugin:worker"))),
    ],
    # RTX A5000 Laptop GPU, driver 575.57.08, CUDA 12.9, v12: average/instant power split
    # (30.63 W average, 30.92 W instant), only current_power_limit.
    "llamaland-rtx-a5000-laptop-drv575.57.08-v12.xml": [
        Want("NVIDIA RTX A5000 Laptop GPU", "GPU-0946ec38-a612-7b0e-8df3-0e64fe5b111e",
             "00000000:01:00.0", 16384, 51, 15932, util=0, temp=61, power=30.63, cap=90.0),
    ],
    # A100-SXM4-40GB, driver 510.47.03, CUDA 11.6, v11: MIG enabled, two 19968 MiB devices.
    "netdata-a100-sxm4-40gb-mig-drv510.47.03-v11.xml": [
        Want("NVIDIA A100-SXM4-40GB", "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a",
             "00000000:00:04.0", 40960, 38, 40315, util=None, temp=36, power=66.92, cap=400.0,
             mig=True, mig_devices=((1, 0, 19968, 19), (2, 0, 19968, 19))),
    ],
    # GeForce RTX 4090, driver 535.86.05, CUDA 12.2, v12: gpu_power_readings/power_draw.
    "netdata-rtx-4090-drv535.86.05-v12.xml": [
        Want("NVIDIA GeForce RTX 4090", "GPU-71d1acc2-662d-2166-bf9f-65272d2fc437",
             "00000000:84:00.0", 24564, 2, 24214, util=0, temp=40, power=26.84, cap=450.0),
    ],
    # Tesla P100-PCIE-16GB, driver 510.47.03, CUDA 11.6, v11, tab-indented.
    "netdata-tesla-p100-pcie-16gb-drv510.47.03-v11.xml": [
        Want("Tesla P100-PCIE-16GB", "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e",
             "00000000:00:04.0", 16384, 0, 16280, util=0, temp=38, power=26.16, cap=250.0),
    ],
    # GRID K520, driver 352.99, the v7 DTD inline in <!DOCTYPE [...]>; no mig_mode yet.
    "rai-project-grid-k520-drv352.99-inline-dtd.xml": [
        Want("GRID K520", "GPU-cc96d6f4-7f66-e1fc-8179-a45dbd47664c",
             "0000:00:03.0", 4095, 11, 4084, util=0, temp=30, power=17.95, cap=125.0),
    ],
    # GRID K520, driver 352.99, nvsmi_device_v7.dtd (2017): a 4-digit PCI domain.
    "rai-project-grid-k520-drv352.99-v7.xml": [
        Want("GRID K520", "GPU-cc96d6f4-7f66-e1fc-8179-a45dbd47664c",
             "0000:00:03.0", 4095, 11, 4084, util=0, temp=31, power=17.97, cap=125.0),
    ],
    # A100-SXM4-80GB, driver 535.54.03, CUDA 12.2, v12: MIG enabled, four devices;
    # attached_gpus says 4 but the file holds one <gpu>.
    "telegraf-a100-sxm4-80gb-mig-drv535.54.03-v12.xml": [
        Want("NVIDIA A100-SXM4-80GB", "GPU-513536b6-7d19-9063-b049-1e69664bb298",
             "00000000:01:00.0", 81920, 50, 80999, util=None, temp=27, power=67.03, cap=500.0,
             mig=True,
             mig_devices=((3, 0, 19968, 12), (4, 0, 19968, 12), (5, 0, 19968, 12),
                          (6, 0, 19968, 12))),
    ],
    # GTX 1660 Ti, driver 418.43, CUDA 10.1, no DOCTYPE: the driver predates the card's
    # name string, so product_name is "Graphics Device".
    "telegraf-gtx-1660-ti-drv418.43.xml": [
        Want("Graphics Device", "GPU-304a277d-3545-63b8-3a36-dfde3c992989",
             "00000000:43:00.0", 5912, 0, 5912, util=0, temp=40, power=8.93, cap=130.0),
    ],
    # Quadro P2000, driver 525.125.06, CUDA 12.0: v12 DTD but still <power_readings>.
    "telegraf-quadro-p2000-drv525.125.06-v12.xml": [
        Want("Quadro P2000", "GPU-396caaed-39ca-3199-2e68-717cdb786ec6",
             "00000000:17:00.0", 5120, 1, 5051, util=0, temp=34, power=4.61, cap=75.0,
             mig=None),
    ],
    # Quadro P400, driver 418.43, CUDA 10.1, no DOCTYPE: every power reading N/A.
    "telegraf-quadro-p400-drv418.43.xml": [
        Want("Quadro P400", "GPU-8f750be4-dfbc-23b9-b33f-da729a536494",
             "00000000:43:00.0", 1998, 0, 1998, util=0, temp=33, power=None, cap=None),
    ],
    # GeForce RTX 3060, driver 570.124.04, CUDA 12.8, v12: average 11.60 W, instant 11.63 W.
    "telegraf-rtx-3060-drv570.124.04-v12.xml": [
        Want("NVIDIA GeForce RTX 3060", "GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625",
             "00000000:2D:00.0", 12288, 116, 11806, util=0, temp=42, power=11.60, cap=170.0),
    ],
    # GeForce RTX 3080, driver 536.40, CUDA 12.2, v12, driver model WDDM: five processes;
    # current_power_limit 336 W (the default is 320 W).
    "telegraf-rtx-3080-drv536.40-v12.xml": [
        Want("NVIDIA GeForce RTX 3080", "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
             "00000000:04:00.0", 10240, 1128, 8938, util=0, temp=31, power=22.78, cap=336.0,
             processes=((835, 550, "/usr/lib/Xorg"), (1481, 18, "/usr/bin/gnome-shell"),
                        (2214, 79, "/opt/microsoft/msedge/msedge"),
                        (4044, 541, "/usr/lib/firefox/firefox"),
                        (42416, 159, "/opt/visual-studio-code/code"))),
    ],
    # GeForce RTX 3080, driver 595.58.03, CUDA 13.2, nvsmi_device_v13.dtd: 9184 MiB used at
    # 65% but no process listed; average 139.62 W, instant 142.33 W.
    "telegraf-rtx-3080-drv595.58.03-v13.xml": [
        Want("NVIDIA GeForce RTX 3080", "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
             "00000000:0C:00.0", 10240, 9184, 660, util=65, temp=27, power=139.62, cap=320.0),
    ],
    # RTX 4000 SFF Ada Generation, driver 595.84, CUDA 13.2, v13: four processes.
    "telegraf-rtx-4000-sff-ada-drv595.84-v13.xml": [
        Want("NVIDIA RTX 4000 SFF Ada Generation", "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
             "00000000:06:00.0", 20475, 3534, 16482, util=0, temp=38, power=8.81, cap=70.0,
             processes=((1842, 410, "cosmic-comp"), (3190, 451, "/usr/bin/code"),
                        (4937, 160, "python"), (34626, 183, "/usr/lib/chromium/chromium"))),
    ],
    # Tesla T4, driver 515.105.01, CUDA 11.7, v11: two processes.
    "telegraf-tesla-t4-drv515.105.01-v11.xml": [
        Want("Tesla T4", "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
             "00000000:00:1E.0", 15360, 1032, 13939, util=0, temp=40, power=26.78, cap=70.0,
             processes=((675, 22, "/usr/lib/xorg/Xorg"), (5762, 1005, "python"))),
    ],
    # GeForce GTX 1070 Ti, driver 470.82.00, CUDA 11.4, v11: four processes.
    "vertex-gtx-1070-ti-drv470.82.00-v11-processes.xml": [
        Want("NVIDIA GeForce GTX 1070 Ti", "GPU-0a6f6ce9-a8af-8c8c-b329-c5338f155fb1",
             "00000000:09:00.0", 8116, 1027, 7089, util=19, temp=39, power=17.22, cap=180.0,
             processes=((59377, 596, "/usr/libexec/Xorg"), (59506, 224, "/usr/bin/gnome-shell"),
                        (60767, 196, "/opt/google/chrome/chrome"),
                        (63265, 5, "/home/f1shl3gs/Softwares/clion/jbr/lib/jcef_helper"))),
    ],
}  # fmt: skip


@needs_corpus
def test_every_xml_capture_has_expected_values() -> None:
    assert {p.name for p in corpus_files("nvidia-smi-xml")} == set(XML_CAPTURES)


@needs_corpus
@pytest.mark.parametrize("name", sorted(XML_CAPTURES))
def test_xml_capture(name: str) -> None:
    gpus = parse_xml((CORPUS / "nvidia-smi-xml" / name).read_text())
    expected = XML_CAPTURES[name]
    assert [g.index for g in gpus] == list(range(len(expected)))
    for gpu, want in zip(gpus, expected, strict=True):
        assert gpu.vendor == "nvidia"
        assert gpu.name == want.name
        assert gpu.uuid == want.uuid
        assert gpu.bus_id == want.bus_id
        assert gpu.memory_total_bytes == want.total * MiB
        assert gpu.memory_used_bytes == want.used * MiB
        assert gpu.memory_free_bytes == want.free * MiB
        assert gpu.utilization_pct == want.util
        assert gpu.activity == (None if want.util is None else "busy")
        assert gpu.temperature_c == want.temp
        assert gpu.temperature_sensor is None
        assert gpu.power_w == want.power
        assert gpu.power_cap_w == want.cap
        assert gpu.mig_enabled is want.mig
        got = [(p.pid, p.used_bytes, (p.name or "").split(" ")[0]) for p in gpu.processes]
        assert got == [(pid, mib * MiB, first) for pid, mib, first in want.processes]
        assert [
            (m.gpu_instance_id, m.compute_instance_id, m.memory_total_bytes, m.memory_used_bytes)
            for m in gpu.mig
        ] == [(gi, ci, total * MiB, used * MiB) for gi, ci, total, used in want.mig_devices]
        assert all(m.uuid is None and m.profile is None for m in gpu.mig)


@needs_corpus
def test_process_command_lines_are_kept_whole() -> None:
    (gpu,) = parse_xml(
        (CORPUS / "nvidia-smi-xml" / "telegraf-rtx-3080-drv536.40-v12.xml").read_text()
    )
    edge = gpu.processes[2].name or ""
    assert edge.startswith("/opt/microsoft/msedge/msedge --type=gpu-process ")
    assert edge.endswith(" --variations-seed-version")


@needs_corpus
@pytest.mark.parametrize("name", sorted(XML_CAPTURES))
def test_xml_capture_survives_the_wire(name: str) -> None:
    for gpu in parse_xml((CORPUS / "nvidia-smi-xml" / name).read_text()):
        assert msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSample) == gpu


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
