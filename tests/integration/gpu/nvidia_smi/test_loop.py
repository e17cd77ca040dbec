"""The nvidia-smi source's looping GPU query, with real child processes.

The fake nvidia-smi (tests/support/gpu_tool.py) loops as nvidia-smi does with `--loop-ms`,
replaying real captures (../shared/corpus/nvidia-smi-csv) and the project's own fixtures,
and hangs, crashes or refuses when a test asks it to.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import psutil
import pytest

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.worker.gpu.nvidia_smi import NvidiaSmiSource, gpu_loop_argv
from placewatch.worker.gpu.nvidia_smi.loop import GpuQueryLoop
from placewatch.worker.gpu.nvidia_smi.query_csv import parse_gpus
from placewatch.worker.probe import ProbeRunner

from tests.conftest import FIXTURES, FakeGpuTools, NatsServer, Worker, corpus_files
from tests.support.eventually import eventually_async
from tests.support.natsproto import RawSubscriber

MiB = 1 << 20
OWN = FIXTURES / "nvidia-smi"
INTERVAL = 0.2
LOOP_ARGS = " ".join(gpu_loop_argv(INTERVAL)[1:])
APPS_HEADER = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
Sample = tuple[list[GpuSample], SourceStatus]


@pytest.fixture
def smi(fake_gpu: FakeGpuTools, monkeypatch: pytest.MonkeyPatch) -> FakeGpuTools:
    fake_gpu.nvidia_smi(OWN / "a100x2-query-gpu-count.csv", OWN / "a100x2-query-compute-apps.csv")
    for key, value in fake_gpu.env().items():
        monkeypatch.setenv(key, value)
    return fake_gpu


def looping(runner: ProbeRunner | None = None, **options: object) -> NvidiaSmiSource:
    return NvidiaSmiSource(
        runner or ProbeRunner(timeout_s=5.0),
        interval_s=INTERVAL,
        restart_s=(0.1, 0.4),
        **options,  # type: ignore[arg-type]
    )


def the_loop(source: NvidiaSmiSource) -> GpuQueryLoop:
    assert source.loop is not None
    return source.loop


def with_loop(source: NvidiaSmiSource, body: Callable[[NvidiaSmiSource], Awaitable[None]]) -> None:
    """`body` while the source's task runs, as the worker runs it; the task cancelled after."""

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(source.run)
            await body(source)
            tg.cancel_scope.cancel()

    anyio.run(go, backend="asyncio")


async def passes(source: NvidiaSmiSource, more: int = 2) -> Sample:
    """A sample (which starts the loop), then `more` passes of it; a sample of the last."""
    loop = the_loop(source)
    first = loop.passes.complete
    await source.sample()
    await eventually_async(lambda: loop.passes.complete >= first + more)
    return await source.sample()


async def next_pass(loop: GpuQueryLoop) -> None:
    first = loop.passes.complete
    await eventually_async(lambda: loop.passes.complete > first)


def restarts(smi: FakeGpuTools) -> int:
    """Children of the loop started after the first, as the fake tool counted its runs."""
    return len(calls(smi, "--loop-ms=")) - 1


async def restarted(smi: FakeGpuTools, times: int) -> None:
    await eventually_async(lambda: restarts(smi) == times)


def calls(smi: FakeGpuTools, what: str) -> list[str]:
    return [c for c in smi.calls("nvidia-smi") if what in c]


def pids(smi: FakeGpuTools, what: str) -> list[int]:
    """Each run of the fake whose arguments hold `what`, and the children it started."""
    runs = [call.split(" ", 1) for call in smi.calls("nvidia-smi")]
    tools = [int(pid) for pid, args in runs if what in args and not args.startswith("child of")]
    children = [int(pid) for pid, args in runs if args in {f"child of {t}" for t in tools}]
    return tools + children


def gone(pids: list[int], seconds: float = 2) -> bool:
    """Whether every one of `pids` has exited and been reaped, within `seconds` (a SIGKILL
    lands when the process is next scheduled)."""
    deadline = time.monotonic() + seconds
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    """Running, or a child of this process that exited unreaped."""
    try:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
    except ChildProcessError:
        pass  # not ours, or reaped
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def processes(gpus: list[GpuSample]) -> list[list[int]]:
    return [[p.pid for p in g.processes] for g in gpus]


def test_one_child_loops_and_each_tick_takes_its_latest_pass(smi: FakeGpuTools) -> None:
    seen: list[Sample] = []

    async def body(source: NvidiaSmiSource) -> None:
        loop = the_loop(source)
        seen.append(await passes(source))
        for _ in range(4):
            await next_pass(loop)
            seen.append(await source.sample())
        assert restarts(smi) == 0

    with_loop(looping(), body)
    for gpus, status in seen:
        assert (status.ok, status.error, status.degraded) == (True, None, False)
        assert [(g.index, g.memory_used_bytes, g.utilization_pct) for g in gpus] == [
            (0, 40960 * MiB, 37), (1, 0, None),
        ]  # fmt: skip
        assert processes(gpus) == [[4242, 4317], [5120]]
    assert len(calls(smi, LOOP_ARGS)) == 1
    # The first tick, before the loop's first pass, asks once; the loop's passes show the same
    # memory in use, so the processes are not asked for again.
    assert len(calls(smi, "--query-gpu=")) == 2
    assert len(calls(smi, "--query-compute-apps=")) == 1
    assert gone(pids(smi, "--query-"))


def test_processes_are_read_again_when_a_pass_shows_memory_change(smi: FakeGpuTools) -> None:
    header, gpu0, gpu1 = (OWN / "a100x2-query-gpu-count.csv").read_text().splitlines()
    grown = gpu0.replace(", 40960, 40405,", ", 45056, 36309,")
    apps = (OWN / "a100x2-query-compute-apps.csv").read_text()
    newcomer = "GPU-3f6c1a52-8e1b-4c2d-9a47-0b5d7e9f1a20, 6000, /usr/bin/python3, 4096\n"
    seen: list[Sample] = []

    async def body(source: NvidiaSmiSource) -> None:
        seen.append(await passes(source))
        seen.append(await source.sample())
        smi.write("nvidia-smi", "query-compute-apps.csv", apps + newcomer)
        smi.write("nvidia-smi", "query-gpu.csv", f"{header}\n{grown}\n{gpu1}\n")
        loop = the_loop(source)
        await eventually_async(
            lambda: (
                loop.passes.latest is not None
                and loop.passes.latest.gpus[0].memory_used_bytes == 45056 * MiB
            )
        )
        seen.append(await source.sample())
        seen.append(await source.sample())

    with_loop(looping(), body)
    assert [processes(gpus) for gpus, _ in seen] == [
        [[4242, 4317], [5120]],
        [[4242, 4317], [5120]],
        [[4242, 4317, 6000], [5120]],
        [[4242, 4317, 6000], [5120]],
    ]
    assert seen[2][0][0].memory_used_bytes == 45056 * MiB
    assert len(calls(smi, "--query-compute-apps=")) == 2


def test_a_list_newer_than_its_readings_is_read_again_not_kept(smi: FakeGpuTools) -> None:
    """A process starts between the GPU query and the list, and ends before a pass shows its
    memory: the readings are the same throughout, and only the list tells it was there. The
    list holds more than its GPU has in use, so the next tick lists again, rather than keep
    the ended process for APPS_MAX_AGE_S."""
    gpu = (OWN / "a100x2-query-gpu-count.csv").read_text()
    apps = (OWN / "a100x2-query-compute-apps.csv").read_text()
    newcomer = "GPU-9d2e4b61-27c3-4f0a-b8e5-6a1c3d5f7b92, 6000, /usr/bin/python3, 4096\n"

    def listed(text: str) -> None:
        """The GPUs' answer as it was, the processes as given (the fake moves no memory)."""
        smi.write("nvidia-smi", "query-gpu.csv", gpu)
        smi.write("nvidia-smi", "query-compute-apps.csv", text)

    seen: list[Sample] = []

    async def body(source: NvidiaSmiSource) -> None:
        listed(apps + newcomer)
        seen.append(await passes(source))
        listed(apps)
        seen.append(await source.sample())
        seen.append(await source.sample())

    with_loop(looping(), body)
    assert [g.memory_used_bytes for g in seen[0][0]] == [40960 * MiB, 0]  # 4096 MiB listed
    assert [processes(gpus) for gpus, _ in seen] == [
        [[4242, 4317], [5120, 6000]],
        [[4242, 4317], [5120]],
        [[4242, 4317], [5120]],
    ]
    # listed at the first tick, the next (ahead still) and the one after it ended; then kept
    assert len(calls(smi, "--query-compute-apps=")) == 3


def test_processes_are_read_again_once_they_are_old_whatever_the_memory(
    smi: FakeGpuTools,
) -> None:
    async def body(source: NvidiaSmiSource) -> None:
        await passes(source)
        for _ in range(3):
            gpus, status = await source.sample()
            assert status.ok and processes(gpus) == [[4242, 4317], [5120]]

    with_loop(looping(apps_max_age_s=0.0), body)
    assert len(calls(smi, "--query-compute-apps=")) == 5  # every tick
    assert len(calls(smi, "--query-gpu=")) == 2  # the first tick's, and the loop


GPU_CAPTURES = [
    *(p for p in corpus_files("nvidia-smi-csv") if "query-gpu" in p.name),
    OWN / "h200-query-gpu.csv",
    OWN / "a100x2-query-gpu.csv",
    OWN / "h100-mig-query-gpu.csv",
]
APPS_OF = {
    "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv": (
        "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-compute-apps-load.csv",
        [[21180, 21181, 21198]],
    ),
    "h200-query-gpu.csv": ("h200-query-compute-apps.csv", [[492, 488]]),
    "a100x2-query-gpu.csv": ("a100x2-query-compute-apps.csv", [[4242, 4317], [5120]]),
    "h100-mig-query-gpu.csv": ("h100-mig-query-compute-apps.csv", [[31337]]),
}


@pytest.mark.parametrize("capture", GPU_CAPTURES, ids=lambda p: p.name)
def test_a_real_capture_looped_reads_as_it_does_once(smi: FakeGpuTools, capture: Path) -> None:
    apps_name, want = APPS_OF.get(capture.name, (None, None))
    apps = capture.parent / apps_name if apps_name else None
    smi.write("nvidia-smi", "query-gpu.csv", capture)
    smi.write("nvidia-smi", "query-compute-apps.csv", apps if apps else APPS_HEADER)
    seen: list[Sample] = []

    async def body(source: NvidiaSmiSource) -> None:
        seen.append(await passes(source))

    with_loop(looping(), body)
    ((gpus, status),) = seen
    assert status.ok, status.error
    once = parse_gpus(capture.read_text())
    assert [g.index for g in gpus] == [g.index for g in once]
    for got, read in zip(gpus, once, strict=True):
        assert (got.uuid, got.name, got.memory_used_bytes, got.memory_total_bytes) == (
            read.uuid, read.name, read.memory_used_bytes, read.memory_total_bytes,
        )  # fmt: skip
        assert (got.utilization_pct, got.temperature_c, got.power_w, got.power_cap_w) == (
            read.utilization_pct, read.temperature_c, read.power_w, read.power_cap_w,
        )  # fmt: skip
    assert processes(gpus) == (want or [[] for _ in gpus])
    assert len(calls(smi, "--loop-ms=")) == 1


def test_a_hung_loop_is_killed_restarted_and_reported_degraded_meanwhile(
    smi: FakeGpuTools,
) -> None:
    seen: dict[str, Sample] = {}

    async def body(source: NvidiaSmiSource) -> None:
        loop = the_loop(source)
        seen["before"] = await passes(source)
        # The child stops printing; its successor prints nothing until told.
        smi.write("nvidia-smi", "loop-hold", "")
        smi.write("nvidia-smi", "loop-hang", "")
        await eventually_async(lambda: loop.child.hangs == 1 and loop.child.pid is not None)
        await eventually_async(lambda: loop.fresh() is None)
        seen["hung"] = await source.sample()
        (smi.data / "nvidia-smi" / "loop-hold").unlink()
        seen["after"] = await passes(source, more=1)
        assert (restarts(smi), loop.child.hangs) == (1, 1)

    with_loop(looping(), body)
    for when in ("before", "hung", "after"):
        gpus, _ = seen[when]
        assert [g.memory_used_bytes for g in gpus] == [40960 * MiB, 0], when
        assert processes(gpus) == [[4242, 4317], [5120]], when
    _, hung = seen["hung"]
    assert (hung.ok, hung.degraded) == (False, True)
    assert hung.error == (
        "nvidia-smi printed nothing for 0.4 s and was killed with its process group (1 so far); "
        "started again in 0 s. If it keeps hanging, check dmesg for Xid errors and whether "
        "`nvidia-smi` answers when run by hand"
    )
    _, after = seen["after"]
    assert (after.ok, after.error, after.degraded) == (True, None, False)
    looped = pids(smi, LOOP_ARGS)
    assert len(looped) == 3  # the hung child, the child it started, its successor
    assert gone(looped)


def test_a_crashed_loop_is_restarted_and_says_why_until_it_reads_again(
    smi: FakeGpuTools,
) -> None:
    fell = "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"
    seen: dict[str, Sample] = {}

    async def body(source: NvidiaSmiSource) -> None:
        loop = the_loop(source)
        await passes(source)
        smi.write("nvidia-smi", "loop-hold", "")
        smi.write("nvidia-smi", "loop-crash", f"15 {fell}")
        await eventually_async(lambda: restarts(smi) == 1 and loop.fresh() is None)
        seen["crashed"] = await source.sample()
        (smi.data / "nvidia-smi" / "loop-hold").unlink()
        seen["after"] = await passes(source, more=1)
        assert (restarts(smi), loop.child.hangs) == (1, 0)

    with_loop(looping(), body)
    gpus, crashed = seen["crashed"]
    assert [g.index for g in gpus] == [0, 1], "the tick read once meanwhile"
    assert (crashed.ok, crashed.degraded) == (False, False)
    assert crashed.error == (
        f"nvidia-smi exited 15: {fell}; starting it again in 0.1 s "
        f"(run `nvidia-smi {LOOP_ARGS}` by hand to see why)"
    )
    _, after = seen["after"]
    assert (after.ok, after.error) == (True, None)
    assert gone(pids(smi, LOOP_ARGS))


def test_restarts_leave_no_process_and_no_descriptor_behind(smi: FakeGpuTools) -> None:
    counted: dict[str, int] = {}

    async def body(source: NvidiaSmiSource) -> None:
        loop = the_loop(source)
        await passes(source)
        counted["one child"] = open_fds()
        for n in range(1, 6):
            smi.write("nvidia-smi", "loop-crash" if n % 2 else "loop-hang", "9 boom")
            await restarted(smi, n)
            await passes(source, more=1)
        counted["after five"] = open_fds()
        assert (restarts(smi), loop.child.hangs) == (5, 2)

    source = looping()
    counted["no child"] = open_fds()
    with_loop(source, body)
    counted["stopped"] = open_fds()
    assert counted["after five"] == counted["one child"]
    assert counted["stopped"] == counted["no child"]
    looped = pids(smi, LOOP_ARGS)
    assert len(looped) == 6 + 2  # six children, two of which hung with a child of their own
    assert gone(looped)


def test_a_driver_that_refuses_the_csv_fields_is_read_through_its_xml(smi: FakeGpuTools) -> None:
    smi.write("nvidia-smi", "refuse-csv", "")
    smi.write("nvidia-smi", "q.xml", OWN / "l4x2-q.xml")
    seen: list[Sample] = []

    async def body(source: NvidiaSmiSource) -> None:
        loop = the_loop(source)
        seen.append(await source.sample())
        await eventually_async(lambda: loop.refused is not None)
        seen.append(await source.sample())

    with_loop(looping(), body)
    for gpus, status in seen:
        assert status.ok, status.error
        assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA L4"), (1, "NVIDIA L4")]
    assert len(calls(smi, LOOP_ARGS)) == 1, "a refused loop is not started again"
    assert len(calls(smi, "-q -x")) == 2


def test_a_tool_that_cannot_loop_is_asked_once_a_tick(smi: FakeGpuTools) -> None:
    smi.write("nvidia-smi", "refuse-loop", "")
    seen: list[Sample] = []

    async def body(source: NvidiaSmiSource) -> None:
        loop = the_loop(source)
        seen.append(await source.sample())
        await eventually_async(lambda: loop.refused is not None)
        for _ in range(3):
            seen.append(await source.sample())
        assert loop.refused == (
            "exited 2: Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
        )

    source = looping()
    with_loop(source, body)
    assert source.loop is None
    for gpus, status in seen:
        assert (status.ok, status.error) == (True, None)
        assert processes(gpus) == [[4242, 4317], [5120]]
    assert len(calls(smi, LOOP_ARGS)) == 1
    assert len(calls(smi, "--query-gpu=")) == 1 + 4
    assert len(calls(smi, "--query-compute-apps=")) == 4


# The worker: `placewatch run` as a child process, its telemetry read off a real nats-server.

WORKER_INTERVAL = 0.5
WORKER_LOOP = f"--loop-ms={round(WORKER_INTERVAL * 1000)}"


def smi_source(doc: object) -> dict[str, object]:
    assert isinstance(doc, dict)
    (source,) = [s for s in doc["sources"] if s["name"] == "nvidia-smi"]
    assert isinstance(source, dict)
    return source


def telemetry_until(
    sub: RawSubscriber, check: Callable[[dict[str, object]], bool], seconds: float = 15
) -> dict[str, object]:
    """The first telemetry for which `check` holds on its nvidia-smi source; fails after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        doc = sub.next(timeout=5).json()
        assert isinstance(doc, dict)
        if check(smi_source(doc)):
            return doc
    raise AssertionError(f"no telemetry within {seconds} s matched")


def gpu_readings(doc: dict[str, object]) -> list[tuple[object, ...]]:
    gpus = doc["gpus"]
    assert isinstance(gpus, list)
    # Schema 2: each GPU's processes are a map of pid (a JSON object key) to bytes held.
    return [(g["index"], g["memory_used_bytes"], [int(p) for p in g["processes"]]) for g in gpus]


READ = [(0, 40960 * MiB, [4242, 4317]), (1, 0, [5120])]


def test_the_worker_loops_reports_a_hang_degraded_restarts_and_leaves_no_child(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, workers: list[Worker]
) -> None:
    fake_gpu.nvidia_smi(OWN / "a100x2-query-gpu-count.csv", OWN / "a100x2-query-compute-apps.csv")
    args = ("--nats", nats_server.url, "--node", "N", "--interval", str(WORKER_INTERVAL))
    with RawSubscriber(nats_server.url, "placewatch.telemetry.N") as sub:
        worker = Worker(*args, "--gpu-sources", "nvidia-smi", env=fake_gpu.env())
        workers.append(worker)
        ok = telemetry_until(sub, lambda s: s["ok"] is True)
        assert gpu_readings(ok) == READ
        # Ticks go by on the loop's passes: one child, no spawn of the GPU query a tick.
        for _ in range(4):
            doc = sub.next(timeout=5).json()
            assert isinstance(doc, dict) and gpu_readings(doc) == READ
            assert smi_source(doc)["ok"] is True
        assert len(calls(fake_gpu, WORKER_LOOP)) == 1
        assert len(calls(fake_gpu, "--query-gpu=")) <= 2, "the first tick's, then the loop's"
        assert len(calls(fake_gpu, "--query-compute-apps=")) <= 2

        # The child stops printing; its successor prints nothing until told.
        fake_gpu.write("nvidia-smi", "loop-hold", "")
        fake_gpu.write("nvidia-smi", "loop-hang", "")
        hung = telemetry_until(sub, lambda s: s["degraded"] is True)
        said = smi_source(hung)
        assert said["ok"] is False
        assert str(said["error"]).startswith(
            "nvidia-smi printed nothing for 1 s and was killed with its process group (1 so far)"
        )
        assert gpu_readings(hung) == READ, "the tick reads once while the loop is down"
        (fake_gpu.data / "nvidia-smi" / "loop-hold").unlink()
        back = telemetry_until(sub, lambda s: s["ok"] is True)
        assert (smi_source(back)["degraded"], smi_source(back)["error"]) == (False, None)
        assert gpu_readings(back) == READ

        # The child exits: it is started again after a pause, and the source says so meanwhile.
        fake_gpu.write("nvidia-smi", "loop-hold", "")
        fake_gpu.write("nvidia-smi", "loop-crash", "15 Unable to determine the device handle")
        crashed = telemetry_until(sub, lambda s: "exited 15" in str(s["error"]))
        assert smi_source(crashed)["error"] == (
            "nvidia-smi exited 15: Unable to determine the device handle; starting it again in "
            f"1 s (run `nvidia-smi {' '.join(gpu_loop_argv(WORKER_INTERVAL)[1:])}` by hand to "
            "see why)"
        )
        assert gpu_readings(crashed) == READ
        (fake_gpu.data / "nvidia-smi" / "loop-hold").unlink()
        telemetry_until(sub, lambda s: s["ok"] is True)

        looped = pids(fake_gpu, WORKER_LOOP)
        # The child that hung and its own child, the one that exited, the last.
        assert len(looped) == 3 + 1
        running = [p for p in looped if _running(p)]
        assert len(running) == 1, "one child loops"
        assert psutil.Process(running[0]).ppid() == worker.proc.pid
        code, _, _, err = worker.stop()
    assert code == 0, err
    assert gone(looped), "a clean stop kills the looping child"
