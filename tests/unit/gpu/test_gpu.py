"""What every source that runs a vendor tool shares: finding it on PATH, and its status."""

from __future__ import annotations

from pathlib import Path

import pytest

from placewatch.worker.gpu import ToolSource
from placewatch.worker.probe import ProbeRunner


class ExampleSmi(ToolSource):
    name = "example-smi"
    vendor = "amd"


def test_a_tool_on_path_is_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "example-smi"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ExampleSmi(ProbeRunner(), "example-smi").unavailable() is None


def test_a_tool_missing_or_not_executable_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "example-smi").write_text("#!/bin/sh\n")  # not executable
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ExampleSmi(ProbeRunner(), "example-smi").unavailable() == (
        "example-smi not found on PATH"
    )


def test_the_status_is_ok_without_an_error_and_names_the_source() -> None:
    source = ExampleSmi(ProbeRunner(), "example-smi")
    ok = source._status(41.23456)
    assert (ok.name, ok.vendor, ok.ok, ok.error, ok.degraded) == (
        "example-smi", "amd", True, None, False,
    )  # fmt: skip
    assert ok.latency_ms == 41.235
    failed = source._status(5000.0, "example-smi timed out after 5 s", stuck=True)
    assert (failed.ok, failed.error, failed.degraded) == (
        False, "example-smi timed out after 5 s", True,
    )  # fmt: skip
