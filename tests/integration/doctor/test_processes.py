"""Whether the worker sees the GPU processes in its /proc: as `placewatch doctor` runs it, and
against a /proc folder laid out by the test (the check's `proc` parameter)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from placewatch.schemas import GpuProcess, GpuSample, PlacementSpec
from placewatch.worker.doctor.processes import check_processes
from placewatch.worker.doctor.report import Report
from placewatch.worker.engines import LLAMA_CPP
from placewatch.worker.shards.discover import Discovered

from tests.conftest import GPU0, FakeGpuTools, apps, free_port, run_placewatch
from tests.support.doctor import A100_GPUS, lines

HOST_PID_NAMESPACE = (
    "run the worker with the host's PID namespace (docker run --pid=host / pid: host)"
)


def gpu(index: int, *pids: int) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA A100-SXM4-80GB",
        processes=[GpuProcess(pid=p, used_bytes=2 << 30) for p in pids],
    )


def fake_proc(root: Path, *pids: int) -> Path:
    """A /proc with an entry, command line and environment, for each of `pids`."""
    for pid in pids:
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"llama-server\0-ngl\x0099\0")
        (root / str(pid) / "environ").write_bytes(b"CUDA_VISIBLE_DEVICES=0\0")
    root.mkdir(exist_ok=True)
    return root


def checked(
    gpus: list[GpuSample], found: list[Discovered], proc: Path = Path("/proc")
) -> list[str]:
    said: list[str] = []
    check_processes(gpus, found, Report(said.append), proc)
    return said


def test_a_gpu_process_and_an_engine_this_worker_can_read_are_ok() -> None:
    holder = subprocess.Popen(["sleep", "60"])
    engine = subprocess.Popen(["sleep", "60"])
    try:
        found = [Discovered(PlacementSpec(id="llama-8b-a", gpus=[0], pid=engine.pid), LLAMA_CPP)]
        said = checked([gpu(0, holder.pid, engine.pid)], found)
    finally:
        for p in (holder, engine):
            p.kill()
            p.wait()
    assert said == [
        "ok    shard processes: 2 GPU processes in this worker's /proc, 1 engine (llama-8b-a) "
        "readable (cmdline, environ)"
    ]


def test_no_gpu_process_and_no_engine_is_skipped() -> None:
    assert checked([gpu(0), gpu(1)], []) == [
        "skip  shard processes: no engine process found and no GPU process listed by the tools"
    ]


def test_some_gpu_processes_missing_while_others_are_there_asks_to_look_again(
    tmp_path: Path,
) -> None:
    proc = fake_proc(tmp_path / "proc", 4100)
    assert checked([gpu(0, 4100), gpu(1, 4200)], [], proc) == [
        "fail  shard processes: the GPU tools list 1 process not in this worker's /proc "
        "(4200 on nvidia GPU 1), while the others are there: exited since, or in another PID "
        f"namespace; next: run `placewatch doctor` again; if they stay, {HOST_PID_NAMESPACE}"
    ]


def test_more_than_five_missing_processes_are_cut_short(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc")
    (line,) = checked([gpu(0, *range(101, 108))], [], proc)
    assert line.startswith(
        "fail  shard processes: the GPU tools list 7 processes not in this worker's /proc "
        "(101 on nvidia GPU 0, 102 on nvidia GPU 0, 103 on nvidia GPU 0, 104 on nvidia GPU 0, "
        "105 on nvidia GPU 0, ...): the worker runs in a container without the host's PID "
        "namespace"
    )


def test_a_gpu_process_missing_from_proc_asks_for_the_hosts_pid_namespace(
    fake_gpu: FakeGpuTools,
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS, apps({4194300: (GPU0, 38912)}))  # above any pid_max
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", env=fake_gpu.env())
    assert done.returncode == 1
    assert lines(done.stdout, "shard processes") == [
        "fail  shard processes: the GPU tools list 1 process not in this worker's /proc "
        "(4194300 on nvidia GPU 0): the worker runs in a container without the host's PID "
        "namespace and sees no engine PIDs; next: run the worker with the host's PID namespace "
        "(docker run --pid=host / pid: host)"
    ]
