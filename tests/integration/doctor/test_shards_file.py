"""`placewatch doctor --shards FILE`: the file's engines pre-flighted, each line naming its
placement; with `--no-discover`, no engine it did not name. Real llama-servers (a CPU-only
build lists no GPU in `--list-devices`), and no GPU tool on the test's PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil

from placewatch.schemas import PlacementSpec
from placewatch.worker.doctor.engines import engines_to_check
from placewatch.worker.doctor.placed import Placed, check_shards_file
from placewatch.worker.doctor.report import Report

from tests.conftest import SCOPE, free_port, run_placewatch
from tests.support.doctor import lines
from tests.support.llama_server import LlamaServers


def doctor(*args: str) -> str:
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", *args)
    return done.stdout


def test_no_discover_preflights_the_shards_file_s_engine_and_walks_no_processes(
    llama_servers: LlamaServers, cpu_only_build: Path, tmp_path: Path
) -> None:
    placed, placed_port = llama_servers.start("-ngl", "99")
    _, other_port = llama_servers.start("-ngl", "99")  # nothing places this one
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "tiny-placed"\npid = {placed.pid}\ngpus = [0]\n')
    build = os.path.realpath(cpu_only_build)

    out = doctor("--no-discover", "--shards", str(shards))
    assert lines(out, "shards file") == [f"ok    shards file: {shards}: 1 placement, 1 running"]
    assert lines(out, "engine pre-flight") == [
        f"skip  engine pre-flight: llama-server ({build}) of tiny-placed (shards file): lists no "
        "GPU device; the GPU tools see none"
    ]
    assert f"llama-server-{other_port}" not in out, out
    assert lines(out, "shard processes") == [
        "skip  shard processes: no engine process found and no GPU process listed by the tools"
    ]

    # The same, discovering: the other engine is found and asked too; the placed one is not
    # discovered a second time.
    out = doctor("--shards", str(shards))
    (preflight,) = lines(out, "engine pre-flight")
    assert preflight.startswith(f"skip  engine pre-flight: llama-server ({build}) of tiny-placed")
    assert f", llama-server-{other_port}" in preflight
    assert f"llama-server-{placed_port}" not in out  # claimed by the file


def test_a_placement_not_running_or_running_no_llama_cpp_build_is_said_to_be_skipped(
    tmp_path: Path,
) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "asleep"\npid = {sleeper.pid}\n\n'
        f'[[shard]]\nid = "gone"\npid = {gone.pid}\n\n'
        '[[shard]]\nid = "unmatched"\nmatch = "no-such-engine --port 1"\n\n'
        '[[shard]]\nid = "vllm-elsewhere"\nmatch = "no-such-vllm"\nengine = "vllm"\n'
    )
    said: list[str] = []
    try:
        sleep = psutil.Process(sleeper.pid).exe()
        placed = check_shards_file(str(shards), Report(said.append), SCOPE)
        assert engines_to_check([], [], Report(said.append), placed) == []
    finally:
        sleeper.kill()
        sleeper.wait()
    assert said == [
        f"ok    shards file: {shards}: 4 placements, 1 running",
        f"skip  engine pre-flight: gone (shards file): pid {gone.pid} is not running, so its "
        "build was not asked",
        "skip  engine pre-flight: unmatched (shards file): no running process matches "
        "'no-such-engine --port 1', so its build was not asked",
        f"skip  engine pre-flight: asleep (shards file): runs {sleep}, no llama.cpp build to ask",
    ]


def test_a_shards_file_doctor_cannot_use_fails_saying_why(tmp_path: Path) -> None:
    shards = tmp_path / "shards.toml"
    shards.write_text('[[shard]]\nid = "a"\ngpus = [0]\n\n[[shard\n')
    said: list[str] = []
    assert check_shards_file(str(shards), Report(said.append), SCOPE) == []
    (line,) = said
    assert line.startswith(f"fail  shards file: {shards} is not valid TOML (")
    assert line.endswith("; next: fix it as the message says (docs/shards.md)")
    assert Placed(PlacementSpec(id="a", match="x"), None).missing == (
        "no running process matches 'x'"
    )


def test_two_entries_on_one_process_fail_naming_both(tmp_path: Path) -> None:
    shards = tmp_path / "shards.toml"
    me = os.getpid()
    shards.write_text(
        f'[[shard]]\nid = "a"\npid = {me}\ngpus = [0]\n\n'
        f'[[shard]]\nid = "b"\npid = {me}\ngpus = [1]\n'
    )
    said: list[str] = []
    placed = check_shards_file(str(shards), Report(said.append), SCOPE)
    assert [(p.spec.id, p.pid) for p in placed] == [("a", me), ("b", me)]
    assert said[0] == (
        f"fail  shards file: shards-file entry 'b' names process {me}, which shards-file entry "
        "'a' holds: the worker refuses it; next: one process is one shard: remove one of the "
        "two entries (docs/shards.md)"
    )
