"""The script each engine's pre-flight runs through, run as the pre-flight runs it:
`python -I -S merged_exec.py N NAME=VALUE... ENGINE [ARG]...`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from placewatch.worker.doctor.engines import MERGED_EXEC


def merged_exec(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", str(MERGED_EXEC), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=10,
        check=False,
    )


def test_the_script_is_a_module_of_the_doctor_package_so_it_is_installed_with_it() -> None:
    spec = importlib.util.find_spec("placewatch.worker.doctor.merged_exec")
    assert spec is not None
    assert spec.origin == str(MERGED_EXEC)
    assert MERGED_EXEC.is_file()


def test_the_engines_stderr_comes_back_on_stdout_in_the_order_written() -> None:
    done = merged_exec("0", "/bin/sh", "-c", "echo one; echo two >&2; echo three")
    assert done.returncode == 0
    assert done.stdout == "one\ntwo\nthree\n"
    assert done.stderr == ""


def test_the_engine_gets_the_environment_given_on_top_of_its_own() -> None:
    env = os.environ | {"KEPT": "from-the-worker", "CUDA_VISIBLE_DEVICES": "0"}
    done = merged_exec(
        "2",
        "CUDA_VISIBLE_DEVICES=1",
        "LD_LIBRARY_PATH=/opt/cuda/lib64:/opt/x=y",
        "/bin/sh",
        "-c",
        'echo "$CUDA_VISIBLE_DEVICES|$LD_LIBRARY_PATH|$KEPT"',
        env=env,
    )
    assert done.stdout == "1|/opt/cuda/lib64:/opt/x=y|from-the-worker\n"


def test_the_engines_arguments_reach_it_as_given() -> None:
    done = merged_exec("0", "/bin/sh", "-c", 'printf "%s|" "$0" "$@"', "llama-server", "a b", "")
    assert done.stdout == "llama-server|a b||"


def test_an_engine_that_cannot_be_run_exits_127_saying_why(tmp_path: Path) -> None:
    missing = tmp_path / "llama-server"
    done = merged_exec("0", str(missing), "--list-devices")
    assert done.returncode == 127
    assert done.stdout == f"cannot run {missing}: No such file or directory\n"
    assert done.stderr == ""
