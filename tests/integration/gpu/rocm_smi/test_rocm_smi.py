"""The rocm-smi source as the worker runs it: the fake rocm-smi replaying the project's
fixtures, per-process VRAM from a KFD tree, and what it says when the tool fails."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from placewatch.worker.gpu.rocm_smi import ROCM_SMI_ARGS, RocmSmiSource
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES, FakeGpuTools
from tests.support.kfd_tree import make_kfd_tree

GiB = 1 << 30
OWN = FIXTURES / "rocm-smi"


def use_fake_tools(fake: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> None:
    env = fake.env()
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("FAKE_GPU_DIR", env["FAKE_GPU_DIR"])


def test_source_replays_the_fixture_through_a_fake_rocm_smi(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu.install("rocm-smi")
    fake_gpu.write("rocm-smi", "output.txt", OWN / "mi300x-style.json")
    use_fake_tools(fake_gpu, monkeypatch)
    # KFD: llama-server holds 96 GiB on the card at bus 0c (card0), nothing on 22.
    kfd = make_kfd_tree(
        tmp_path / "kfd", {2: (41416, 0x0C00), 3: (14446, 0x2200)}, {4242: {41416: 96 * GiB}}
    )
    source = RocmSmiSource(ProbeRunner(timeout_s=20), kfd_root=kfd)
    assert source.unavailable() is None
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert status.ok, status.error
    assert (status.name, status.vendor, status.error, status.degraded) == (
        "rocm-smi", "amd", None, False,
    )  # fmt: skip
    assert status.latency_ms is not None and status.latency_ms > 0
    assert [(g.utilization_pct, g.activity) for g in gpus] == [(21, "power"), (100, "power")]
    assert [(p.pid, p.used_bytes) for p in gpus[0].processes] == [(4242, 96 * GiB)]
    assert gpus[1].processes == []
    (call,) = fake_gpu.calls("rocm-smi")
    assert call.split(" ", 1)[1] == " ".join(ROCM_SMI_ARGS)


def test_source_without_a_kfd_tree_leaves_processes_unknown(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu.install("rocm-smi")
    fake_gpu.write("rocm-smi", "output.txt", OWN / "rx7900xtx-consumer.json")
    use_fake_tools(fake_gpu, monkeypatch)
    source = RocmSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert status.ok
    assert [(g.utilization_pct, g.processes) for g in gpus] == [(27, [])]


def test_source_reports_a_failing_tool_in_its_own_words(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    here = fake_gpu.install("rocm-smi")
    (here / "fail").write_text("2 ERROR: amdgpu driver not initialized\n")
    use_fake_tools(fake_gpu, monkeypatch)
    source = RocmSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert gpus == []
    assert not status.ok
    assert status.vendor == "amd"
    assert status.error == "rocm-smi exited 2: ERROR: amdgpu driver not initialized"


def test_source_with_no_cards_says_what_to_check(
    fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu.install("rocm-smi")
    fake_gpu.write("rocm-smi", "output.txt", '{"system": {"Driver version": "6.3.6"}}\n')
    use_fake_tools(fake_gpu, monkeypatch)
    source = RocmSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert gpus == []
    assert status.error is not None
    assert "rocm-smi printed no cards" in status.error
    assert "render and video groups" in status.error


def test_source_uses_what_rocm_smi_printed_before_a_nonzero_exit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # rocm-smi exits 2 when one asked reading is unsupported, after printing the rest.
    tool = tmp_path / "bin" / "rocm-smi"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/sh\ncat "{OWN / "rx7900xtx-consumer.json"}"\nexit 2\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    source = RocmSmiSource(ProbeRunner(timeout_s=20), kfd_root=tmp_path / "no-kfd")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert status.ok
    assert [g.utilization_pct for g in gpus] == [27]


def test_source_is_unavailable_without_the_tool() -> None:
    source = RocmSmiSource(ProbeRunner(), tool="rocm-smi-that-is-not-installed")
    assert source.unavailable() == "rocm-smi-that-is-not-installed not found on PATH"
