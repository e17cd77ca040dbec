"""The amd-smi source as the worker runs it: an amd-smi on PATH answering from the
project's fixtures, the KFD tree preferred for processes, an older amd-smi's refusals."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from placewatch.worker.gpu.amd_smi import (
    METRIC_ALL_ARGS,
    METRIC_ARGS,
    METRIC_BASIC_ARGS,
    PROCESS_ARGS,
    AmdSmiSource,
)
from placewatch.worker.gpu.health import assess
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES
from tests.support.kfd_tree import make_kfd_tree

GiB = 1 << 30
OWN = FIXTURES / "amd-smi"


def fake_amd_smi(where: Path, metric: Path | str, process: Path | str, refuse: str = "") -> Path:
    """An amd-smi that answers `metric` and `process` from files and logs its argv.

    With `refuse`, it fails like an older amd-smi's argument parser on that flag.
    """
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, content in (("metric", metric), ("process", process)):
        text = content.read_text() if isinstance(content, Path) else content
        (where / f"{name}.json").write_text(text)
    refusal = (
        f'case "$*" in *{refuse}*) echo "amd-smi: error: unrecognized arguments: '
        f'{refuse}" >&2; exit 2;; esac\n'
        if refuse
        else ""
    )
    tool = bin_dir / "amd-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{where}/calls.log"\n'
        f"{refusal}"
        f'case "$1" in\n'
        f'  metric) cat "{where}/metric.json";;\n'
        f'  process) cat "{where}/process.json";;\n'
        '  *) echo "unknown command $1" >&2; exit 2;;\n'
        "esac\n"
    )
    tool.chmod(0o755)
    return bin_dir


def calls(where: Path) -> list[str]:
    log = where / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_source_reads_amd_smi_processes_where_there_is_no_kfd_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_amd_smi(tmp_path, OWN / "mi300x-metric.json", OWN / "mi300x-process.json")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = AmdSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    assert source.unavailable() is None
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert status.ok, status.error
    assert (status.name, status.vendor, status.degraded) == ("amd-smi", "amd", False)
    assert [(g.index, g.utilization_pct, g.activity) for g in gpus] == [
        (0, 100, "busy"),
        (1, 0, "busy"),
    ]
    assert [(p.pid, p.used_bytes) for p in gpus[0].processes] == [(4242, 96 * GiB)]
    assert gpus[1].processes == []
    assert calls(tmp_path) == [" ".join(METRIC_ARGS), " ".join(PROCESS_ARGS)]
    # The clock, ECC and energy blocks come through; GPU 1's uncorrected error is judged.
    assert [(g.sm_clock_mhz, g.memory_clock_mhz) for g in gpus] == [(2100, 1300), (132, 900)]
    idle = assess(gpus[1]).health
    assert idle is not None and idle.healthy is False
    assert idle.problems[0].startswith("1 uncorrected ECC error(s) since the amdgpu driver loaded")


def test_source_prefers_the_kfd_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = fake_amd_smi(tmp_path, OWN / "mi300x-metric.json", OWN / "mi300x-process.json")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    # metric prints no bus ids: KFD's GPUs are matched in PCI order.
    kfd = make_kfd_tree(
        tmp_path / "kfd", {2: (41416, 0x0C00), 3: (14446, 0x2200)}, {5150: {14446: 3 * GiB}}
    )
    source = AmdSmiSource(ProbeRunner(timeout_s=20), kfd_root=kfd)
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert status.ok
    assert gpus[0].processes == []
    assert [(p.pid, p.used_bytes) for p in gpus[1].processes] == [(5150, 3 * GiB)]
    assert calls(tmp_path) == [" ".join(METRIC_ARGS)]


def test_source_falls_back_to_the_full_metric_on_an_older_amd_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_amd_smi(tmp_path, OWN / "mi300x-metric.json", "[]", refuse="--mem-usage")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = AmdSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    for _ in range(2):
        gpus, status = anyio.run(source.sample, backend="asyncio")
        assert status.ok, status.error
        assert [g.utilization_pct for g in gpus] == [100, 0]
    assert calls(tmp_path) == [
        " ".join(METRIC_ARGS),
        " ".join(METRIC_BASIC_ARGS),
        " ".join(METRIC_ALL_ARGS),
        " ".join(PROCESS_ARGS),
        " ".join(METRIC_ALL_ARGS),
        " ".join(PROCESS_ARGS),
    ]


def test_source_keeps_the_basic_blocks_where_health_flags_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # amd-smi offers --ecc, --fan and --energy on bare-metal Linux only: a VM guest refuses.
    bin_dir = fake_amd_smi(tmp_path, OWN / "mi300x-metric.json", "[]", refuse="--ecc")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = AmdSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    for _ in range(2):
        gpus, status = anyio.run(source.sample, backend="asyncio")
        assert status.ok, status.error
        assert [g.utilization_pct for g in gpus] == [100, 0]
    assert calls(tmp_path) == [
        " ".join(METRIC_ARGS),
        " ".join(METRIC_BASIC_ARGS),
        " ".join(PROCESS_ARGS),
        " ".join(METRIC_BASIC_ARGS),
        " ".join(PROCESS_ARGS),
    ]


def test_source_says_when_it_has_readings_but_no_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_amd_smi(tmp_path, OWN / "mi300x-metric.json", "", refuse="process")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = AmdSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert [g.index for g in gpus] == [0, 1]
    assert not status.ok
    assert status.error == (
        "GPU readings only, no processes: amd-smi exited 2: "
        "amd-smi: error: unrecognized arguments: process"
    )


def test_source_with_no_gpus_says_what_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_amd_smi(tmp_path, '{"gpu_data": []}', "[]")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = AmdSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert gpus == []
    assert status.error is not None
    assert status.error.startswith("amd-smi printed no GPUs; run `amd-smi list`")
    # The narrow form answered; each wider one was tried once, in case it was refused.
    assert calls(tmp_path) == [
        " ".join(METRIC_ARGS),
        " ".join(METRIC_BASIC_ARGS),
        " ".join(METRIC_ALL_ARGS),
    ]
