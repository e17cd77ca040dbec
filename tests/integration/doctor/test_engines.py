"""The llama.cpp pre-flight with real processes: fake builds answering `--list-devices`, and
running engines whose executables and environments are read from /proc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from placewatch.schemas import PlacementSpec
from placewatch.worker.doctor import Check, Engine, Report, preflight
from placewatch.worker.doctor.engines import engines_to_check
from placewatch.worker.engines import LLAMA_CPP, OLLAMA
from placewatch.worker.probe import ProbeRunner
from placewatch.worker.shards.discover import Discovered

from tests.conftest import FakeGpuTools, free_port, run_placewatch
from tests.support.doctor import (
    A100_GPUS,
    CUDA_BACKEND_FAILED,
    TWO_CUDA_DEVICES,
    fake_engine,
    lines,
    shell_engine,
)


def test_an_engine_whose_cuda_backend_failed_to_load_fails_with_what_to_check(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS)
    good = fake_engine(tmp_path / "good", TWO_CUDA_DEVICES)
    broken = fake_engine(tmp_path / "broken", CUDA_BACKEND_FAILED)
    done = run_placewatch(
        "doctor",
        "--nats",
        f"nats://127.0.0.1:{free_port()}",
        "--engine",
        str(good),
        "--engine",
        str(broken),
        env=fake_gpu.env(),
    )
    assert done.returncode == 1
    ok, failed = lines(done.stdout, "engine pre-flight")
    assert ok.startswith(f"ok    engine pre-flight: llama-server ({good}): CUDA0 NVIDIA A100")
    assert failed.startswith(
        f"fail  engine pre-flight: llama-server ({broken}): its GPU backend failed: "
        "load_backend: failed to load /opt/llama.cpp/lib/libggml-cuda.so: libcublas.so.12: "
        "cannot open shared object file"
    )
    assert "; next: run ldd /opt/llama.cpp/lib/libggml-cuda.so and install what it lists" in failed
    assert "CUDA runtime (libcudart, libcublas)" in failed


def test_preflight_runs_a_shards_build_with_its_library_path_and_device_mask(
    tmp_path: Path,
) -> None:
    engine = shell_engine(
        tmp_path,
        'echo "Available devices:"\n'
        'echo "  CUDA0: NVIDIA L4 mask=$CUDA_VISIBLE_DEVICES libs=$LD_LIBRARY_PATH '
        '(22563 MiB, 22300 MiB free)"',
    )
    shard = Engine(
        str(engine),
        ("llama-server-8081",),
        (("LD_LIBRARY_PATH", "/opt/cuda/lib64"), ("CUDA_VISIBLE_DEVICES", "1")),
    )
    check = anyio.run(preflight, shard, ProbeRunner(10), 2)
    assert check == Check(
        "engine pre-flight",
        "ok",
        f"llama-server ({engine}) of llama-server-8081: "
        "CUDA0 NVIDIA L4 mask=1 libs=/opt/cuda/lib64",
    )


def test_preflight_skips_a_build_older_than_list_devices(tmp_path: Path) -> None:
    engine = shell_engine(tmp_path, 'echo "error: invalid argument: $1" >&2\nexit 1')
    check = anyio.run(preflight, Engine(str(engine)), ProbeRunner(10), 2)
    assert check.outcome == "skip"
    assert "this build has no --list-devices" in check.found


def test_preflight_fails_a_path_that_is_not_an_executable(tmp_path: Path) -> None:
    missing = tmp_path / "llama-server"
    check = anyio.run(preflight, Engine(str(missing)), ProbeRunner(10), 2)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"llama-server ({missing}): not found or not executable",
        "check the path",
    )


def test_preflight_of_a_build_that_cannot_be_run_says_why(tmp_path: Path) -> None:
    """An executable that is no program (a build for another architecture reads the same)."""
    engine = tmp_path / "llama-server"
    engine.write_bytes(b"\x7fELF not really\n")
    engine.chmod(0o755)
    check = anyio.run(preflight, Engine(str(engine)), ProbeRunner(10), 2)
    assert check.outcome == "fail"
    assert check.found == (
        f"llama-server ({engine}): lists no GPU device, though the GPU tools see 2 GPUs "
        f"(llama-server exited 127: cannot run {engine}: Exec format error)"
    )


@pytest.fixture
def running_build(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A process whose executable is named llama-server, started in a shard's environment."""
    build = tmp_path / "bin" / "llama-server"
    build.parent.mkdir()
    sleep = shutil.which("sleep")
    assert sleep is not None
    shutil.copy(sleep, build)
    env = os.environ | {"LD_LIBRARY_PATH": "/opt/cuda/lib64", "CUDA_VISIBLE_DEVICES": "1"}
    env.pop("CUDA_DEVICE_ORDER", None)
    env.pop("HIP_VISIBLE_DEVICES", None)
    env.pop("ROCR_VISIBLE_DEVICES", None)
    proc = subprocess.Popen([str(build), "60"], env=env)
    yield build, proc
    proc.kill()
    proc.wait()


def test_a_running_llama_cpp_shard_lends_its_build_and_environment(
    running_build: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    build, proc = running_build
    found = [
        Discovered(PlacementSpec(id="llama-8b-a", gpus=[1], pid=proc.pid), LLAMA_CPP),
        Discovered(PlacementSpec(id="llama-8b-b", gpus=[1], pid=proc.pid), LLAMA_CPP),
        Discovered(PlacementSpec(id="ollama", gpus=[0], pid=proc.pid), OLLAMA),
    ]
    said: list[str] = []
    engines = engines_to_check(found, ["sh"], Report(said.append))
    assert engines == [
        Engine(
            str(build),
            ("llama-8b-a", "llama-8b-b"),
            (("LD_LIBRARY_PATH", "/opt/cuda/lib64"), ("CUDA_VISIBLE_DEVICES", "1")),
        ),
        Engine(str(shutil.which("sh"))),
    ]
    assert said == []


def test_a_python_engine_and_an_exited_one_are_not_asked() -> None:
    """llama-cpp-python runs in a Python interpreter, which has no --list-devices."""
    python = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        found = [
            Discovered(PlacementSpec(id="llama-py", pid=python.pid), LLAMA_CPP),
            Discovered(PlacementSpec(id="gone", pid=gone.pid), LLAMA_CPP),
        ]
        said: list[str] = []
        assert engines_to_check(found, [], Report(said.append)) == []
    finally:
        python.kill()
        python.wait()
    assert said == []


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="starts a process as another user: needs root")
@pytest.mark.parametrize("owned_by_nobody", ["", "build", "libraries"])
def test_another_users_engine_is_run_only_when_no_other_user_could_have_changed_it(
    owned_by_nobody: str,
) -> None:
    # Anyone may start a process named llama-server: doctor, as root, must not run a build
    # or load libraries that user could have written.
    place = Path(tempfile.mkdtemp(prefix="placewatch-engine-"))
    try:
        place.chmod(0o755)
        build, libs = place / "llama-server", place / "lib"
        libs.mkdir(mode=0o755)
        sleep = shutil.which("sleep")
        assert sleep is not None
        shutil.copy(sleep, build)
        build.chmod(0o755)
        if owned_by_nobody:
            os.chown(build if owned_by_nobody == "build" else libs, NOBODY, NOBODY)
        proc = subprocess.Popen(
            [str(build), "60"],
            env={"LD_LIBRARY_PATH": str(libs)},
            user=NOBODY,
            group=NOBODY,
        )
        try:
            found = [Discovered(PlacementSpec(id="theirs", gpus=[0], pid=proc.pid), LLAMA_CPP)]
            said: list[str] = []
            engines = engines_to_check(found, [], Report(said.append))
        finally:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(place)
    if not owned_by_nobody:  # root's build and libraries: as safe to run as root's own
        assert engines == [Engine(str(build), ("theirs",), (("LD_LIBRARY_PATH", str(libs)),))]
        assert said == []
        return
    assert engines == []
    changed = build if owned_by_nobody == "build" else libs
    assert said == [
        f"skip  engine pre-flight: theirs: its process runs as user {NOBODY}, and {changed} "
        f"belongs to user {NOBODY}; next: run `placewatch doctor` as that user, or give "
        "--engine PATH for a build you trust: doctor runs no program another user could have "
        "changed"
    ]
