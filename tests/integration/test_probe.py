"""Probe hygiene: no shell, a timeout, the answer taken when the tool exits, the whole group
killed and reaped after every run, one run per tool."""

from __future__ import annotations

import json
import os
import signal
import time

import anyio
import psutil
import pytest

from placewatch.worker.probe import ProbeResult, ProbeRunner, Watched

from tests.conftest import FIXTURES, FakeGpuTools, NatsServer, Worker, run_placewatch
from tests.support.eventually import eventually
from tests.support.natsproto import RawSubscriber

MiB = 1 << 20


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids_of(fake: FakeGpuTools, tool: str) -> list[int]:
    return [int(line.split()[0]) for line in fake.calls(tool)]


def still_running(pids: list[int], seconds: float = 2) -> list[int]:
    """Those of `pids` still running after up to `seconds` (a SIGKILL lands when the
    process is next scheduled, not when kill() returns)."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def left_in_group(pgid: int) -> list[int]:
    """The processes of group `pgid` that are still running."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and alive(pid):
                found.append(pid)
        except ProcessLookupError:
            pass
    return found


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


@pytest.fixture
def lingering(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.linger("nvidia-smi")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


@pytest.mark.parametrize(
    ("exit_file", "error"),
    [(None, None), ("3 driver said no", "nvidia-smi exited 3: driver said no")],
)
def test_the_answer_is_used_once_the_tool_exits_though_its_child_holds_stdout(
    lingering: FakeGpuTools, exit_file: str | None, error: str | None
) -> None:
    lingering.write("nvidia-smi", "output.txt", "GPU 0: NVIDIA H200\n")
    if exit_file is not None:
        lingering.write("nvidia-smi", "exit", exit_file)
    started = time.monotonic()
    result = run(ProbeRunner(timeout_s=5.0), "nvidia-smi", "-L")
    took = time.monotonic() - started
    assert took < 2.5  # not the 5 s timeout: the child's end of the pipe is not waited for
    assert result.latency_ms < 2500
    assert result.stdout == "GPU 0: NVIDIA H200\n"
    assert result.error == error
    assert not result.stuck
    tool_pid, child_pid = pids_of(lingering, "nvidia-smi")
    assert still_running([tool_pid, child_pid]) == []
    assert left_in_group(tool_pid) == []


def test_runs_at_a_short_interval_leave_no_process_behind(lingering: FakeGpuTools) -> None:
    lingering.write("nvidia-smi", "output.txt", "ok\n")
    runner = ProbeRunner(timeout_s=5.0)

    async def go() -> list[ProbeResult]:
        results = []
        for _ in range(10):
            results.append(await runner.run(["nvidia-smi", "-L"]))
            await anyio.sleep(0.2)
        return results

    results = anyio.run(go, backend="asyncio")
    assert [(r.stdout, r.error) for r in results] == [("ok\n", None)] * 10
    pids = pids_of(lingering, "nvidia-smi")
    assert len(pids) == 20  # each run: the tool and the child it left
    assert still_running(pids) == []
    assert [p for tool_pid in pids[::2] for p in left_in_group(tool_pid)] == []


def test_a_worker_whose_nvidia_smi_leaves_children_reads_it_and_leaves_nothing(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, workers: list[Worker]
) -> None:
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv",
        FIXTURES / "nvidia-smi" / "a100x2-query-compute-apps.csv",
    )
    fake_gpu.linger("nvidia-smi")
    with RawSubscriber(nats_server.url, "placewatch.telemetry.N") as sub:
        worker = Worker(
            "--nats", nats_server.url, "--node", "N", "--interval", "0.2", env=fake_gpu.env()
        )
        workers.append(worker)
        # The first after the worker's start (imports, the bus, the first answer waited for
        # whole), the next each within 3 s: a read that waited out the 5 s probe timeout for
        # the child holding its output would miss.
        docs = [sub.next(timeout=30).json()]
        docs += [sub.next(timeout=3).json() for _ in range(4)]
    code, _, _, err = worker.stop()
    assert code == 0, err
    sources = [d["sources"][0] for d in docs if isinstance(d, dict)]
    assert [s["name"] for s in sources] == ["nvidia-smi"] * 5
    # Each run is read as it exits, whatever its child holds: none waits out the probe
    # timeout. A tick that had no answer by its deadline (0.08 s at this interval: a spawn
    # of the stand-in can take longer) says so, and a later one takes it.
    assert sources[0]["ok"]  # the first answer is waited for
    assert all(s["ok"] or "no answer within the tick's deadline" in s["error"] for s in sources)
    read = [d for d in docs if isinstance(d, dict) and d["sources"][0]["ok"]]
    assert read[-1]["gpus"][0]["memory_used_bytes"] == 40960 * MiB
    pids = pids_of(fake_gpu, "nvidia-smi")
    # The GPU query loops in one long-lived tool, the processes are asked at least once,
    # and each run leaves a child holding its output open: at least four pids.
    assert len(pids) >= 4
    runs = fake_gpu.calls("nvidia-smi")
    assert any("--loop-ms=" in run for run in runs)
    assert any("--query-compute-apps=" in run for run in runs)
    assert still_running(pids) == []


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
    eventually(lambda: not any(alive(p) for p in pids), 2, what="the hung tool's processes gone")


async def quiet(watched: Watched) -> bool:
    """Whether nothing wakes `watched` for 0.2 s, after at most one report of a descriptor
    read out just before (the selector looked before it was read)."""
    for _ in range(2):
        with anyio.move_on_after(0.2) as waited:
            await watched.wait()
        if waited.cancelled_caught:
            return True
    return False


def test_watched_pipes_wake_each_time_they_have_data_and_one_at_its_end_is_dropped() -> None:
    async def main() -> None:
        (out, write_out), (err, write_err) = os.pipe(), os.pipe()
        for fd in (out, err):
            os.set_blocking(fd, False)
        try:
            with Watched([out, err]) as watched:
                for line in (b"first pass\n", b"second pass\n"):
                    os.write(write_out, line)
                    with anyio.fail_after(5):
                        assert await watched.wait() == {out}
                    assert os.read(out, 100) == line
                    assert await quiet(watched)  # read out: nothing wakes it
                os.close(write_err)  # at its end: readable for ever
                with anyio.fail_after(5):
                    assert await watched.wait() == {err}
                assert os.read(err, 100) == b""
                assert not await quiet(watched)
                watched.keep([out])
                assert await quiet(watched)
                os.write(write_out, b"third pass\n")
                with anyio.fail_after(5):
                    assert await watched.wait() == {out}
        finally:
            for fd in (out, write_out, err):
                os.close(fd)

    anyio.run(main, backend="asyncio")
