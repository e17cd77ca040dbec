"""A real llama-server (tests/support/llama_server.py), discovered with the log it writes to,
and judged by `placewatch sample` on a node where no GPU tool answers (this one: no driver,
no nvidia-smi, rocm-smi or amd-smi on the test's PATH).

A CPU-only build b11434 started with `-ngl 99` prints "warning: no usable GPU found,
--gpu-layers option will be ignored" on stderr, and only there: its `--log-file` gets
llama.cpp's common log, which at `-lv 4` names only CPU buffers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from placewatch.worker.shards.discover import Discovered, discover

from tests.conftest import SCOPE, run_placewatch
from tests.support.llama_server import LlamaServers


def discovered(pid: int) -> Discovered:
    (mine,) = [d for d in discover([], scope=SCOPE) if d.spec.pid == pid]
    return mine


def sample() -> dict[str, dict[str, Any]]:
    """`placewatch sample --json` on this node, its shards by id; the GPU sources asserted
    to have not answered."""
    done = run_placewatch("sample", "--json", "--grace", "0")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["gpus"] == [] and not any(s["ok"] for s in doc["sources"])
    return {b["shard"]: b for b in doc["shards"]}


def silent_sources() -> list[str]:
    done = run_placewatch("sample", "--json", "--no-discover")
    return [s["name"] for s in json.loads(done.stdout)["sources"] if not s["ok"]]


@pytest.mark.parametrize("stdout_too", [True, False], ids=["2>&1", "stderr-only"])
def test_a_llama_server_writing_to_a_file_is_discovered_with_that_file_as_its_log(
    llama_servers: LlamaServers, tmp_path: Path, stdout_too: bool
) -> None:
    log = tmp_path / "llama.log"
    with open(log, "ab") as out:
        proc, _ = llama_servers.start(
            "-ngl", "99", stdout=out if stdout_too else subprocess.DEVNULL, stderr=out
        )
    assert discovered(proc.pid).spec.log_path == str(log)


def test_a_llama_server_writing_to_a_pipe_or_dev_null_has_no_log(
    llama_servers: LlamaServers,
) -> None:
    piped, _ = llama_servers.start("-ngl", "99", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    nowhere, _ = llama_servers.start("-ngl", "99")
    assert discovered(piped.pid).spec.log_path is None
    assert discovered(nowhere.pid).spec.log_path is None


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_llama_cpp_s_log_file_is_its_log_relative_to_its_working_folder(
    llama_servers: LlamaServers, tmp_path: Path, how: str
) -> None:
    args = ("--log-file", "server.log") if how == "flag" else ()
    env = {"LLAMA_ARG_LOG_FILE": "server.log"} if how == "variable" else None
    proc, _ = llama_servers.start("-ngl", "0", *args, cwd=tmp_path, env=env)
    assert discovered(proc.pid).spec.log_path == str(tmp_path / "server.log")


def test_a_log_file_named_by_a_process_that_does_not_hold_it_is_not_followed(
    tmp_path: Path,
) -> None:
    # Anyone may start a process named llama-server: a file it names but did not open (it
    # could not) is not read by a worker that runs as root.
    fake = tmp_path / "llama-server"
    fake.symlink_to(sys.executable)
    secret = tmp_path / "secret"
    secret.write_text("not for the worker\n")
    argv = [
        str(fake),
        "-c",
        "import time; time.sleep(60)",
        "-m",
        "m.gguf",
        "--log-file",
        str(secret),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Just after a vfork's Popen returns, /proc/PID/cmdline may read empty for a moment.
        deadline = time.monotonic() + 10
        while not psutil.Process(proc.pid).cmdline():
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.01)
        assert discovered(proc.pid).spec.log_path is None
    finally:
        proc.kill()
        proc.wait()


def test_without_gpu_tools_the_engine_s_own_word_in_its_log_is_cpu_fallback(
    llama_servers: LlamaServers, cpu_only_build: Path, tmp_path: Path
) -> None:
    with open(tmp_path / "redirected.log", "ab") as out:
        _, redirected = llama_servers.start("-ngl", "99", stdout=out, stderr=out)
    _, log_file = llama_servers.start(
        "-ngl", "99", "-lv", "4", "--log-file", "own.log", cwd=tmp_path
    )
    shards = sample()
    said = shards[f"llama-server-{redirected}"]
    assert said["verdict"] == "cpu_fallback", said
    assert said["reason"].startswith(
        "asked for GPUs (-ngl 99) but computing on the CPU: llama.cpp says 'warning: no usable "
        "GPU found, --gpu-layers option will be ignored'; "
    )
    assert "`placewatch doctor`" in said["reason"]
    own = shards[f"llama-server-{log_file}"]
    assert own["verdict"] == "cpu_fallback", own
    # the log file has no warning, but its device_info lists only the CPU
    assert own["reason"].startswith(
        "asked for GPUs (-ngl 99) but computing on the CPU: llama.cpp lists no GPU device, only "
        "the CPU; run a GPU build (e.g. -DGGML_CUDA=ON, "
    )


def test_without_gpu_tools_or_a_log_an_engine_asking_for_gpus_is_unknown_naming_the_tools(
    llama_servers: LlamaServers, tmp_path: Path
) -> None:
    proc, piped = llama_servers.start("-ngl", "99", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pipe = os.readlink(f"/proc/{proc.pid}/fd/2")
    # --log-file at llama.cpp's default verbosity: the file says nothing of its devices.
    _, quiet = llama_servers.start("-ngl", "99", "--log-file", "quiet.log", cwd=tmp_path)
    shards, silent = sample(), silent_sources()
    assert silent, "a GPU source answered on this node: the test needs none to"
    untold = (
        "cannot tell which GPUs it was meant for: it asks for GPUs (-ngl 99), but no GPU "
        f"tool answered on this node ({', '.join(silent)}); run `placewatch doctor` to see why"
    )
    hidden = (
        "; llama.cpp runs at verbosity 3, which hides where its layers go: run it with -lv 4 "
        "(or LLAMA_ARG_LOG_VERBOSITY=4)"
    )
    no_log = (
        f"; it has no log: its output goes to a pipe (stderr, fd 2: {pipe}), which only the "
        "process at its other end reads; send it to a file (> FILE 2>&1; or --log-file FILE) "
        "or run it as a systemd unit, whose output the journal holds"
    )
    for port, reason in ((piped, untold + no_log), (quiet, untold + hidden)):
        said = shards[f"llama-server-{port}"]
        assert (said["verdict"], said["reason"]) == ("unknown", reason), said


def test_without_gpu_tools_an_engine_started_with_ngl_0_is_cpu_on_purpose(
    llama_servers: LlamaServers, tmp_path: Path
) -> None:
    with open(tmp_path / "cpu.log", "ab") as out:
        _, port = llama_servers.start("-ngl", "0", stdout=out, stderr=out)
    said = sample()[f"llama-server-{port}"]
    assert (said["verdict"], said["reason"]) == ("cpu", "placed on the CPU on purpose (-ngl 0)")
