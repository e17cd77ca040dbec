"""nvidia-smi CSV queries: read by header name, `[N/A]` is None, processes by GPU UUID.

Real captures in ../shared/corpus/nvidia-smi-csv (drivers 465 to 610, Linux
and Windows) and the project's own fixtures in the exact format the worker asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from placewatch.worker.gpu.nvidia_smi import (
    APP_FIELDS,
    GPU_FIELDS,
    _ahead,
    apps_query_argv,
    gpu_query_argv,
)
from placewatch.worker.gpu.nvidia_smi.query_csv import (
    ComputeApp,
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)

from tests.conftest import CORPUS, FIXTURES, corpus_files, needs_corpus

MiB = 1 << 20
OWN = FIXTURES / "nvidia-smi"


def test_queries_ask_by_field_name_and_keep_the_header() -> None:
    argv = gpu_query_argv()
    assert argv[0] == "nvidia-smi"
    assert argv[1] == "--query-gpu=" + ",".join(GPU_FIELDS)
    assert argv[2] == "--format=csv,nounits"
    assert apps_query_argv()[1] == "--query-compute-apps=" + ",".join(APP_FIELDS)


def test_own_fixture_reads_exact_bytes_and_null_for_missing() -> None:
    gpus = parse_gpus((OWN / "a100x2-query-gpu.csv").read_text())
    assert [g.index for g in gpus] == [0, 1]
    busy, idle = gpus
    assert busy.uuid == "GPU-3f6c1a52-8e1b-4c2d-9a47-0b5d7e9f1a20"
    assert busy.name == "NVIDIA A100-SXM4-80GB"
    assert busy.bus_id == "00000000:07:00.0"
    assert busy.utilization_pct == 37
    assert busy.activity == "busy"
    assert busy.memory_total_bytes == 81920 * MiB
    assert busy.memory_used_bytes == 40960 * MiB
    assert busy.memory_free_bytes == 40405 * MiB
    assert busy.temperature_c == 45
    assert busy.power_w == 212.34
    assert busy.power_cap_w == 400.0
    assert idle.utilization_pct is None
    assert idle.activity is None
    assert idle.temperature_c is None
    assert idle.power_w is None
    assert idle.memory_used_bytes == 0  # a real zero stays zero
    assert idle.power_cap_w == 400.0  # the rest of the row survives


def test_processes_are_mapped_to_gpus_by_uuid() -> None:
    gpus = parse_gpus((OWN / "a100x2-query-gpu.csv").read_text())
    apps = parse_compute_apps((OWN / "a100x2-query-compute-apps.csv").read_text())
    gpus = attach_processes(gpus, apps)
    assert [(p.pid, p.used_bytes, p.name) for p in gpus[0].processes] == [
        (4242, 38912 * MiB, "/opt/llama.cpp/bin/llama-server"),
        (4317, 2048 * MiB, "python3"),
    ]
    assert [(p.pid, p.used_bytes) for p in gpus[1].processes] == [(5120, None)]


@pytest.mark.parametrize(
    "missing",
    [
        "[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]",
        "[Requested functionality has been deprecated]", "[Function Not Found]", "",
    ],
)  # fmt: skip
def test_every_spelling_of_missing_is_null_and_keeps_the_row(missing: str) -> None:
    text = (
        "index, name, utilization.gpu [%], memory.total [MiB], memory.used [MiB], power.draw [W]\n"
        f"3, Tesla T4, {missing}, 15360, {missing}, 27.5\n"
    )
    (gpu,) = parse_gpus(text)
    assert gpu.index == 3
    assert gpu.utilization_pct is None
    assert gpu.memory_used_bytes is None
    assert gpu.memory_total_bytes == 15360 * MiB
    assert gpu.power_w == 27.5


def test_columns_are_found_by_name_in_any_order_with_units_in_values() -> None:
    text = (
        "memory.used [MiB], power.draw [W], name, index, utilization.gpu [%]\n"
        "1024 MiB, 70.25 W, NVIDIA L4, 2, 55 %\n"
    )
    (gpu,) = parse_gpus(text)
    assert (gpu.index, gpu.name, gpu.memory_used_bytes, gpu.power_w, gpu.utilization_pct) == (
        2, "NVIDIA L4", 1024 * MiB, 70.25, 55,
    )  # fmt: skip


def test_process_name_with_commas_is_joined_back() -> None:
    text = (
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        r"GPU-1, 77, C:\Program Files\A, B\app.exe, 512"
        "\n"
    )
    (app,) = parse_compute_apps(text)
    assert app.pid == 77
    assert app.name == r"C:\Program Files\A, B\app.exe"
    assert app.used_bytes == 512 * MiB


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "No devices were found\n", "garbage,,,\n\x00\x01", '"unterminated\n1,2'],
)
def test_bad_output_gives_no_gpus_and_does_not_raise(text: str) -> None:
    assert parse_gpus(text) == []
    assert parse_compute_apps(text) == []


# What each real capture says, read by hand from the file.
GPU_CAPTURES: dict[str, list[dict[str, Any]]] = {
    "netdata-tesla-p100-pcie-16gb-query-gpu-nounits.csv": [
        # memory.total is not queried: reserved 103 + used 0 + free 16280.
        dict(name="Tesla P100-PCIE-16GB", uuid="GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6",
             total=16383, used=0, free=16280, util=0, temp=37, power=28.16, cap=None),
    ],
    "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv": [
        # MIG enabled: utilization.gpu is [N/A].
        dict(name="NVIDIA H100 80GB HBM3", uuid="GPU-00000000-0000-0000-0000-000000000000",
             total=81559, used=11125, free=69956, util=None, temp=53, power=433.78, cap=700.0),
    ],
    "utkuozdemir-l40s-linux-drv595.80-query-gpu-load.csv": [
        dict(name="NVIDIA L40S", uuid="GPU-00000000-0000-0000-0000-000000000000",
             total=46068, used=1235, free=44225, util=9, temp=54, power=110.23, cap=350.0),
    ],
    "utkuozdemir-rtx-2080-super-linux-drv465.27-query-gpu.csv": [
        dict(name="NVIDIA GeForce RTX 2080 SUPER", uuid="GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",
             total=7979, used=344, free=7635, util=0, temp=32, power=30.37, cap=250.0),
    ],
    "utkuozdemir-rtx-2080-super-windows-drv471.11-query-gpu.csv": [
        dict(name="NVIDIA GeForce RTX 2080 SUPER", uuid="GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",
             total=8192, used=876, free=7316, util=2, temp=36, power=32.70, cap=250.0),
    ],
    "utkuozdemir-rtx-2080-super-windows-drv610.62-query-gpu-load.csv": [
        dict(name="NVIDIA GeForce RTX 2080 SUPER", uuid="GPU-00000000-0000-0000-0000-000000000000",
             total=8192, used=1366, free=6622, util=7, temp=44, power=97.99, cap=250.0),
    ],
    "utkuozdemir-rtx-4080-super-linux-drv595.71.05-query-gpu-load.csv": [
        dict(name="NVIDIA GeForce RTX 4080 SUPER", uuid="GPU-00000000-0000-0000-0000-000000000000",
             total=16376, used=1474, free=14470, util=7, temp=46, power=84.24, cap=320.0),
    ],
    "virtualclient-tesla-t4-4gpu-drv510.108.03-query-gpu-nounits.csv": [
        dict(name="Tesla T4", uuid=None, total=16384, used=used, free=free, util=0, temp=temp,
             power=None, cap=None)
        for used, free, temp in [(257, 15670, 48), (14, 15913, 51), (14, 15913, 53), (14, 15913, 53)]
    ],
}  # fmt: skip

APP_CAPTURES: dict[str, list[tuple[int, str | None, int | None]]] = {
    "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-compute-apps-load.csv": [
        (21180, "/root/tools/memhog", 2296), (21181, "/root/tools/memhog", 1272),
        (21198, "./gpu_burn", 7484),
    ],
    "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-compute-apps-idle-empty.csv": [],
    "utkuozdemir-rtx-2080-super-windows-drv591.86-query-compute-apps-load.csv": [
        (pid, None, None) for pid in
        (12444, 15076, 2056, 12332, 20372, 4680, 14160, 14184, 16280, 24804, 25704, 26660)
    ],
}  # fmt: skip


@needs_corpus
def test_every_csv_capture_has_expected_values() -> None:
    named = {p.name for p in corpus_files("nvidia-smi-csv")}
    assert named == set(GPU_CAPTURES) | set(APP_CAPTURES)


@needs_corpus
@pytest.mark.parametrize("name", sorted(GPU_CAPTURES))
def test_gpu_capture(name: str) -> None:
    gpus = parse_gpus((CORPUS / "nvidia-smi-csv" / name).read_text())
    expected = GPU_CAPTURES[name]
    assert [g.index for g in gpus] == list(range(len(expected)))
    for gpu, want in zip(gpus, expected, strict=True):
        assert gpu.name == want["name"]
        assert gpu.uuid == want["uuid"]
        assert gpu.memory_total_bytes == want["total"] * MiB
        assert gpu.memory_used_bytes == want["used"] * MiB
        assert gpu.memory_free_bytes == want["free"] * MiB
        assert gpu.utilization_pct == want["util"]
        assert gpu.temperature_c == want["temp"]
        assert gpu.power_w == want["power"]
        assert gpu.power_cap_w == want["cap"]


@needs_corpus
@pytest.mark.parametrize("name", sorted(APP_CAPTURES))
def test_compute_apps_capture(name: str) -> None:
    apps = parse_compute_apps((CORPUS / "nvidia-smi-csv" / name).read_text())
    got = [(a.pid, None if a.used_bytes is None else a.used_bytes // MiB) for a in apps]
    assert got == [(pid, mib) for pid, _, mib in APP_CAPTURES[name]]
    for app, (_, process, _) in zip(apps, APP_CAPTURES[name], strict=True):
        if process is not None:
            assert app.name == process
        assert app.gpu_uuid == "GPU-00000000-0000-0000-0000-000000000000"
    if "windows" in name:
        assert apps[4].name == r"C:\Program Files\NZXT CAM\NZXT CAM.exe"


@needs_corpus
def test_h100_processes_attach_to_its_gpu() -> None:
    here = CORPUS / "nvidia-smi-csv"
    gpus = parse_gpus(
        (here / "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv").read_text()
    )
    apps = parse_compute_apps(
        (
            here / "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-compute-apps-load.csv"
        ).read_text()
    )
    (gpu,) = attach_processes(gpus, apps)
    assert sum(p.used_bytes or 0 for p in gpu.processes) == (2296 + 1272 + 7484) * MiB
    assert gpu.memory_used_bytes == 11125 * MiB


def test_compute_apps_with_numbers_past_64_bits_still_encode_as_messagepack() -> None:
    """A pid or a size no process can have is left out or no reading; the rest is kept, and
    what is read fits MessagePack's integers."""
    apps = parse_compute_apps(
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "GPU-1, 99999999999999999999999, /bin/x, 10 MiB\n"
        "GPU-1, 4242, /bin/y, 18446744073709551615 MiB\n"
        "GPU-1, 4243, /bin/z, 1024 MiB\n"
    )
    assert [(a.pid, a.used_bytes) for a in apps] == [(4242, None), (4243, 1 << 30)]
    msgspec.msgpack.encode(apps)


PAIRS = [
    (OWN / "h200-query-gpu.csv", OWN / "h200-query-compute-apps.csv"),
    (OWN / "a100x2-query-gpu.csv", OWN / "a100x2-query-compute-apps.csv"),
    (OWN / "h100-mig-query-gpu.csv", OWN / "h100-mig-query-compute-apps.csv"),
    *(
        (p, p.with_name(p.name.replace("query-gpu", "query-compute-apps")))
        for p in corpus_files("nvidia-smi-csv")
        if "query-gpu" in p.name
        and p.with_name(p.name.replace("query-gpu", "query-compute-apps")).exists()
    ),
]


@pytest.mark.parametrize(("gpu", "apps"), PAIRS, ids=lambda p: p.name)
def test_a_list_read_after_its_readings_is_not_ahead_of_them(gpu: Path, apps: Path) -> None:
    gpus, listed = parse_gpus(gpu.read_text()), parse_compute_apps(apps.read_text())
    assert listed and not _ahead(gpus, listed)
    # one process more, holding a GiB on the first GPU listed: started after the readings
    uuid = next(a.gpu_uuid for a in listed if a.gpu_uuid)
    assert _ahead(gpus, [*listed, ComputeApp(uuid, 999999, "python3", 1 << 30)])
