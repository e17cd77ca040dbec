"""Every structure a log feeds has a limit, whatever the log holds: running requests, finished
ones, parts of lines (the tail's, CRI's, Docker's), the lines kept before a banner, finding
lines and devices. Each test feeds one far past its limit and reads what is kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

from placewatch.worker.engines.evidence.lives import BEFORE_CHARS, MAX_BEFORE, Lives
from placewatch.worker.engines.evidence.read import MAX_LINES, EvidenceReader
from placewatch.worker.engines.evidence.serving import MAX_REQUESTS, MAX_RUNNING, ServingLog
from placewatch.worker.engines.evidence.source import PathLog
from placewatch.worker.engines.evidence.tail import LogTail
from placewatch.worker.engines.evidence.unwrap import MAX_JOINED, MAX_STREAMS, Unwrap

FLOOD = 4096


def launch(slot: int) -> str:
    return f"0.03.049.435 I slot launch_slot_: id {slot} | task 0 | processing task, is_child = 0"


def test_requests_started_on_new_slots_and_never_ended_keep_the_newest() -> None:
    log = ServingLog()
    for slot in range(FLOOD):
        log.read(launch(slot), float(slot))
    running = log.snapshot().requests
    assert len(running) == MAX_RUNNING
    assert running[-1].started == FLOOD - 1 and running[0].started == FLOOD - MAX_RUNNING


def test_finished_requests_are_kept_up_to_their_limit() -> None:
    log = ServingLog()
    for n in range(FLOOD):
        log.read(launch(n), 5.0)
        log.read(f"slot print_timing: id {n} | task 0 | total time = 1.00 ms / 2 tokens", 5.0)
    assert len(log.snapshot().requests) == MAX_REQUESTS


def test_parts_of_docker_lines_on_endless_new_streams_keep_a_few() -> None:
    unwrap = Unwrap()
    for n in range(FLOOD):
        part = json.dumps({"log": "x" * 100, "stream": f"s{n}", "time": "2026-12-06T05:31:02Z"})
        assert unwrap.lines(part) == []
    assert len(unwrap._parts) == MAX_STREAMS  # what is held between lines: no public view
    assert all(len(p) <= MAX_JOINED for p in unwrap._parts.values())


def test_a_tail_s_line_that_never_ends_is_held_cut(tmp_path: Path) -> None:
    log = tmp_path / "endless.log"
    tail = LogTail(PathLog(str(log), os.getpid()), max_line=1024)
    with log.open("wb") as out:
        for _ in range(64):
            out.write(b"y" * 65536)
            out.flush()
            assert tail.poll(1 << 20) == []
        assert len(tail._partial) == 1024  # what is held between polls: no public view
        out.write(b"\n")
    assert tail.poll() == ["y" * 1024]


def test_lines_kept_before_a_banner_are_few_and_short() -> None:
    lives = Lives()
    line = "ggml_cuda_init: found 1 CUDA devices:" + " " * 10_000
    for _ in range(FLOOD):
        assert lives.see(line, line.lower()) is None
    replay = lives.see("build: 1 (a) with cc", "build: 1 (a) with cc")
    assert replay is not None
    assert len(replay) == MAX_BEFORE + 1
    assert max(len(x) for x in replay) == BEFORE_CHARS


def test_a_banner_every_line_keeps_one_life_of_evidence() -> None:
    reader = EvidenceReader()
    for n in range(FLOOD // 4):
        reader.read(f"build: {n} (a) with cc")
        reader.read(f"load_tensors: offloaded {n % 33}/33 layers to GPU")
    said = reader.snapshot()
    assert said.lines == (f"load_tensors: offloaded {(FLOOD // 4 - 1) % 33}/33 layers to GPU",)
    assert reader.lives.starts == FLOOD // 4


def test_finding_lines_and_devices_are_kept_up_to_their_limits() -> None:
    reader = EvidenceReader()
    for n in range(FLOOD // 4):
        reader.read(f"load_tensors: offloaded {n % 33}/33 layers to GPU")
        reader.read(f"llama_model_load_from_file_impl: using device CUDA{n} (NVIDIA A100) - 1 MiB")
    said = reader.snapshot()
    assert len(said.lines) == MAX_LINES
    assert len(said.devices) == 64
