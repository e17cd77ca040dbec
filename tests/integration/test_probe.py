"""Probe hygiene: no shell, a timeout, the whole group killed and reaped, one run per tool."""

from __future__ import annotations

import json
import os
import signal
import time

import anyio
import psutil
import pytest

from placewatch.probe import ProbeResult, ProbeRunner

from tests.conftest import FakeGpuTools, run_placewatch


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids_of(fake: FakeGpuTools, tool: str) -> list[int]:
    return [int(line.split()[0]) for line in fake.calls(tool)]


def run(runner: ProbeRunner, *argv: str) -> ProbeResult:
    async def go() -> ProbeResult:
        return await runner.run(list(argv))

    return anyio.run(go, backend="asyncio")


@pytest.fixture
def hanging(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.hang("nvidia-smi")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def test_a_hung_tool_is_killed_with_its_group_at_the_timeout(hanging: FakeGpuTools) -> None:
    started = time.monotonic()
    result = run(ProbeRunner(timeout_s=1.0), "nvidia-smi", "-q")
    took = time.monotonic() - started
    assert 1.0 <= took < 2.5
    assert not result.ok and not result.stuck
    assert result.error == "nvidia-smi timed out after 1 s and was killed"
    pids = pids_of(hanging, "nvidia-smi")
    assert len(pids) == 2  # the tool and the child it started
    deadline = time.monotonic() + 2
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), "a probe process outlived the timeout"


def test_a_tool_that_survives_the_kill_blocks_new_runs_until_it_exits(
    hanging: FakeGpuTools,
) -> None:
    # SIGTERM stands in for SIGKILL here: the fake ignores it, as a tool in
    # uninterruptible sleep ignores SIGKILL.
    runner = ProbeRunner(timeout_s=0.5, kill_signal=signal.SIGTERM)

    async def scenario() -> None:
        first = await runner.run(["nvidia-smi", "-q"])
        assert first.stuck and "timed out" in (first.error or "")
        tool_pid, child_pid = pids_of(hanging, "nvidia-smi")
        assert runner.stuck("nvidia-smi") == tool_pid
        second = await runner.run(["nvidia-smi", "-q"])
        assert second.stuck
        assert second.error == (
            f"nvidia-smi (pid {tool_pid}) is stuck in the driver and survived SIGKILL; "
            "not starting another until it exits (check dmesg for Xid errors)"
        )
        assert len(pids_of(hanging, "nvidia-smi")) == 2, "a second probe was started"
        os.killpg(tool_pid, signal.SIGKILL)  # the driver lets go
        with anyio.fail_after(3):
            while runner.stuck("nvidia-smi") is not None:
                await anyio.sleep(0.05)
        (hanging.data / "nvidia-smi" / "hang").unlink()
        hanging.write("nvidia-smi", "output.txt", "ok\n")
        third = await runner.run(["nvidia-smi", "-q"])
        assert third.ok and third.stdout == "ok\n" and not third.stuck
        assert not alive(child_pid)

    anyio.run(scenario, backend="asyncio")


def test_one_run_per_tool_at_a_time(hanging: FakeGpuTools) -> None:
    runner = ProbeRunner(timeout_s=1.0)
    results: list[ProbeResult] = []

    async def go() -> None:
        async def one() -> None:
            results.append(await runner.run(["nvidia-smi", "-q"]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(0.2)
            tg.start_soon(one)

    anyio.run(go, backend="asyncio")
    assert [r.error for r in results] == [
        "the previous nvidia-smi is still running",
        "nvidia-smi timed out after 1 s and was killed",
    ]
    assert len(pids_of(hanging, "nvidia-smi")) == 2  # one tool, one child: a single run


def test_exit_status_and_missing_tool_are_reported() -> None:
    runner = ProbeRunner(timeout_s=5)
    missing = run(runner, "no-such-gpu-tool")
    assert missing.error == "no-such-gpu-tool not found on PATH"
    failed = run(runner, "sh", "-c", "echo 'driver says no' >&2; exit 9")
    assert failed.error == "sh exited 9: driver says no"
    ok = run(runner, "echo", "a;b $HOME")  # no shell: nothing is expanded
    assert ok.ok and ok.stdout == "a;b $HOME\n"
    assert ok.latency_ms > 0


def test_sample_with_a_hung_nvidia_smi_returns_in_time_and_leaves_nothing(
    fake_gpu: FakeGpuTools,
) -> None:
    fake_gpu.hang("nvidia-smi")
    started = time.monotonic()
    done = run_placewatch("sample", "--json", "--probe-timeout", "2", env=fake_gpu.env())
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < 2 + 2.5
    sources = {s["name"]: s for s in json.loads(done.stdout)["sources"]}
    assert sources["nvidia-smi"]["ok"] is False
    assert sources["nvidia-smi"]["error"] == "nvidia-smi timed out after 2 s and was killed"
    assert sources["nvidia-smi"]["latency_ms"] >= 2000
    pids = pids_of(fake_gpu, "nvidia-smi")
    assert len(pids) == 2
    time.sleep(0.3)
    assert not any(alive(p) for p in pids)
