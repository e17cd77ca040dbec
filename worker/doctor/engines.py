"""The llama.cpp pre-flight: each build's own `--list-devices`, judged against the node's GPUs.

A build whose GPU backend does not load still starts, and serves on the CPU;
`--list-devices` is the cheapest way to ask it, before any model is loaded,
which GPUs it would use. The builds asked are those of the llama.cpp shards
running on the node (the shards file's, and those discovery finds unless it is
off), each with the library path and device mask of its shard, and every
`--engine PATH` given; each line names the shards it is for.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread
import psutil

from ..engines import ENGINES, engine_named
from ..engines.evidence.read import read_text
from ..probe import ProbeRunner
from ..shards.discover import Discovered
from .placed import Placed
from .processes import AS_ENGINE_USER
from .report import Check, Report, count

ENGINE = "engine pre-flight"

ENGINE_TIMEOUT_S = 30.0
"""Default limit for one `--list-devices`: CUDA initialises every GPU first (seconds on 8)."""

ENGINE_ENV = (
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)
"""What a running engine's environment lends its pre-flight: where its libraries are found and
which GPUs it may see, so the build is asked as the shard runs it."""

MERGED_EXEC = Path(__file__).with_name("merged_exec.py")
"""The script each engine is started through, for its stderr to come back with its stdout."""

_BACKEND_LIB = re.compile(r"(\S*ggml-(?:cuda|hip|rocm|vulkan|sycl|musa)\S*?\.(?:so|dll))")
_NO_FLAG = re.compile(r"(?:invalid|unknown) argument: --list-devices")

EnvLent = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Engine:
    """An engine binary to ask which GPUs it can use, and what of its environment to lend it."""

    path: str
    shards: tuple[str, ...] = ()
    env: EnvLent = ()


async def check_engines(
    found: Sequence[Discovered],
    given: Sequence[str],
    node_gpus: int,
    timeout_s: float,
    report: Report,
    *,
    placed: Sequence[Placed] = (),
) -> None:
    engines = await anyio.to_thread.run_sync(engines_to_check, found, given, report, placed)
    if not engines:
        report.skip(ENGINE, "no llama.cpp engine running and none given with --engine PATH")
    runner = ProbeRunner(timeout_s)
    for engine in engines:
        report.add(await preflight(engine, runner, node_gpus))


def engines_to_check(
    found: Sequence[Discovered],
    given: Sequence[str],
    report: Report,
    placed: Sequence[Placed] = (),
) -> list[Engine]:
    """The executables of the shards file's llama.cpp shards and of the discovered ones, then
    every --engine PATH. A placement whose process is not running is said to be skipped,
    unless it names another engine than llama.cpp."""
    engines: dict[tuple[str, EnvLent], list[str]] = {}
    shards = [(p.label, p.pid, True) for p in placed]
    shards += [(d.spec.id, d.spec.pid, False) for d in found if _lists_devices(d.engine)]
    for p in placed:
        if p.pid is None and (p.spec.engine is None or _lists_devices(p.spec.engine)):
            report.skip(ENGINE, f"{p.label}: {p.missing}, so its build was not asked")
    for label, pid, named in shards:
        running = _running_build(label, pid, report, named) if pid is not None else None
        if running is not None:
            engines.setdefault(running, []).append(label)
    for path in given:
        resolved = os.path.abspath(path) if os.sep in path else shutil.which(path) or path
        engines.setdefault((resolved, ()), [])
    return [Engine(path, tuple(shards), env) for (path, env), shards in engines.items()]


def _lists_devices(name: str | None) -> bool:
    """Whether the builds of the engine `name` answer `--list-devices`."""
    engine = engine_named(name)
    return engine is not None and engine.lists_devices


def _running_build(label: str, pid: int, report: Report, named: bool) -> tuple[str, EnvLent] | None:
    """A running shard's llama.cpp executable and the environment to lend it, when this
    worker can run it; a skip line says why not when it cannot, or, for a shard the shards
    file `named`, when it runs no llama.cpp build."""
    try:
        process = psutil.Process(pid)
        exe = process.exe()
    except psutil.AccessDenied:
        report.skip(
            ENGINE,
            f"{label}: its executable cannot be read (/proc/{pid}/exe)",
            f"{AS_ENGINE_USER}, or give it with --engine PATH",
        )
        return None
    except psutil.Error:
        return None  # it exited
    if not os.path.basename(exe).startswith("llama-"):
        if named:
            report.skip(ENGINE, f"{label}: runs {exe}, no llama.cpp build to ask")
        return None  # llama-cpp-python: a Python interpreter has no --list-devices
    if not os.path.exists(exe):
        report.skip(
            ENGINE,
            f"{label}: {exe} is not in this worker's filesystem (a container?)",
            f"run `{os.path.basename(exe)} --list-devices` where the engine runs",
        )
        return None
    env = _engine_env(process)
    foreign = _foreign_code(process, exe, env)
    if foreign is not None:
        report.skip(
            ENGINE,
            f"{label}: {foreign}",
            "run `placewatch doctor` as that user, or give --engine PATH for a build you trust: "
            "doctor runs no program another user could have changed",
        )
        return None
    return exe, env


def _foreign_code(process: psutil.Process, exe: str, env: EnvLent) -> str | None:
    """Why running `exe` with `env` could run another user's code as this one, or None.

    Anyone may start a process named llama-server; doctor, often run as root, must not run
    what that user wrote, nor load libraries from where that user lends LD_LIBRARY_PATH. A
    process of doctor's own user is its own code. Otherwise the executable, its folder and
    each library folder lent must belong to root or to doctor's user, and be writable by no
    one else. (A change between this check and the run is not defended against.)
    """
    try:
        user = process.uids().effective
    except psutil.Error:
        return "its process's user cannot be read"
    if user == os.geteuid():
        return None
    folders = [p for k, v in env if k == "LD_LIBRARY_PATH" for p in v.split(os.pathsep) if p]
    for path in (exe, os.path.dirname(exe), *folders):
        try:
            st = os.stat(path)
        except OSError:
            return f"its process runs as user {user}, and {path} cannot be looked at"
        if st.st_uid not in (0, os.geteuid()):
            return f"its process runs as user {user}, and {path} belongs to user {st.st_uid}"
        if st.st_mode & 0o022:
            return f"its process runs as user {user}, and others than its owner may write {path}"
    return None


def _engine_env(process: psutil.Process) -> EnvLent:
    try:
        environ = process.environ()
    except psutil.Error:
        return ()
    return tuple((k, environ[k]) for k in ENGINE_ENV if k in environ)


async def preflight(engine: Engine, runner: ProbeRunner, node_gpus: int) -> Check:
    """`ENGINE --list-devices`, judged against the GPUs the node's tools see."""
    if not _runnable(engine.path):
        return Check(
            ENGINE, "fail", f"{_label(engine)}: not found or not executable", "check the path"
        )
    env = [f"{k}={v}" for k, v in engine.env]
    argv = [sys.executable, "-I", "-S", str(MERGED_EXEC), str(len(env)), *env, engine.path]
    result = await runner.run([*argv, "--list-devices"])
    error = (
        result.error.replace(result.tool, os.path.basename(engine.path), 1)
        if result.error
        else None
    )
    return list_devices_check(engine, result.stdout, error, node_gpus)


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _label(engine: Engine) -> str:
    label = f"{os.path.basename(engine.path)} ({engine.path})"
    return f"{label} of {', '.join(engine.shards)}" if engine.shards else label


def list_devices_check(engine: Engine, text: str, error: str | None, node_gpus: int) -> Check:
    """What a build's `--list-devices` says, its stderr merged in: `error` is why the run
    failed (a timeout, an exit status), None when it exited 0."""
    label = _label(engine)
    if _NO_FLAG.search(text):
        return Check(
            ENGINE,
            "skip",
            f"{label}: this build has no --list-devices (an older llama.cpp)",
            "read the GPU lines it prints at start (ggml_cuda_init, offloaded N/M layers)",
        )
    if error is not None and not text.strip():
        return Check(
            ENGINE,
            "fail",
            f"{label}: {error}",
            "check dmesg for Xid errors (a GPU stuck in the driver), or raise --timeout",
        )
    evidence = read_text(text)
    devices = ", ".join(_device(d, evidence.lines) for d in evidence.found_devices)
    if evidence.gpu_failed is not None:
        return _backend_failed(label, evidence.gpu_failed, evidence.gpu_backend, devices, node_gpus)
    if not devices:
        cpu_only = error is None and evidence.gpu_backend is None
        libraries = _backend_libraries(engine.path)
        return _no_device(label, error, node_gpus, cpu_only and libraries == [])
    if error is not None:
        return Check(
            ENGINE,
            "fail",
            f"{label}: lists {devices}, then {error}",
            f"run {engine.path} --list-devices and read what it prints last",
        )
    return Check(ENGINE, "ok", f"{label}: {devices}")


def _backend_failed(
    label: str, failed: str, backend: str | None, devices: str, node_gpus: int
) -> Check:
    found = f"{label}: its GPU backend failed: {failed}"
    found += f" (it lists {devices})" if devices else ""
    if node_gpus == 0:
        return Check(ENGINE, "skip", f"{found}; the GPU tools see no GPU here")
    return Check(ENGINE, "fail", found, _backend_advice(failed, backend))


def _no_device(label: str, error: str | None, node_gpus: int, cpu_only: bool) -> Check:
    """No GPU listed; `cpu_only`: nothing it printed names a GPU backend, and no backend
    library is beside it, so it was compiled without one."""
    if node_gpus == 0:
        return Check(ENGINE, "skip", f"{label}: lists no GPU device; the GPU tools see none")
    found = f"{label}: lists no GPU device, though the GPU tools see {count(node_gpus, 'GPU')}"
    found += f" ({error})" if error else ""
    if cpu_only:
        return Check(
            ENGINE,
            "fail",
            f"{found}; it has no GPU backend (compiled without GPU support)",
            "run a GPU build of llama.cpp (e.g. -DGGML_CUDA=ON, or a CUDA release; "
            "-DGGML_HIP=ON for AMD GPUs)",
        )
    return Check(
        ENGINE,
        "fail",
        found,
        "check that it was built for them (-DGGML_CUDA=ON, -DGGML_HIP=ON) and that its "
        "libggml-cuda.so (or libggml-hip.so) is beside it; run ldd on that library",
    )


def _backend_libraries(path: str) -> list[str] | None:
    """The GPU backend libraries beside a build (a GGML_BACKEND_DL build loads them from its
    own folder): none for a CPU-only build or a static one; None where its folder cannot be
    read."""
    try:
        names = sorted(os.listdir(os.path.dirname(os.path.abspath(path))))
    except OSError:
        return None
    return [n for n in names if _BACKEND_LIB.fullmatch(n)]


def _device(device: str, lines: Sequence[str]) -> str:
    """A device with its model, from its `CUDA0: NVIDIA A100 (81050 MiB, 80536 MiB free)` line."""
    logs = [e.log() for e in ENGINES if e.lists_devices]
    for line in lines:
        listed = next((x for log in logs if (x := log.listed_device(line))), None)
        if listed is not None and listed[0] == device and listed[1]:
            return f"{device} {listed[1]}"
    return device


def _backend_advice(failed: str, backend: str | None) -> str:
    if backend == "ROCm":
        runtime = "the ROCm runtime (libamdhip64, libhipblas, librocblas) it was built for"
    else:
        runtime = (
            "the CUDA runtime (libcudart, libcublas) of the version it was built for, and a "
            "driver new enough for it (the CUDA Version nvidia-smi prints)"
        )
    library = _BACKEND_LIB.search(failed)
    if library is not None:
        return f"run ldd {library.group(1)} and install what it lists as not found; check {runtime}"
    return (
        f"check {runtime}, that the engine may open the GPU devices (/dev/nvidia*, /dev/kfd in a "
        "container), and run it with -lv 4"
    )
