"""nvidia-smi -q -x: every schema from v7 to v13, read from real captures.

The captures are in ../shared/corpus/nvidia-smi-xml (drivers 352.99 to 595.84, see its
PROVENANCE.md); each one's expected values were read by hand, and its card, driver and DTD
are named beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml

from tests.conftest import CORPUS, corpus_files, needs_corpus

MiB = 1 << 20


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
