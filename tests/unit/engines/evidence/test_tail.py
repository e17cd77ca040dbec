"""Following a log file as it grows: complete lines, a partial one held, a new file noticed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from placewatch.worker.engines.evidence import LogTail
from placewatch.worker.engines.evidence.lives import newest_life
from placewatch.worker.engines.evidence.source import PathLog


def tail_of(path: Path, max_line: int = 64 << 10) -> LogTail:
    """A tail of a file read as this test's own user may read it."""
    return LogTail(PathLog(str(path), os.getpid()), max_line=max_line)


def test_complete_lines_come_and_a_partial_one_is_held(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"")
    tail = tail_of(log)
    assert tail.path == str(log)
    with log.open("ab") as out:
        out.write(b"first line\nsecond li")
        out.flush()
        assert tail.poll() == ["first line"]
        assert tail.poll() == []
        out.write(b"ne\r\nthird")
        out.flush()
        assert tail.poll() == ["second line"]
        out.write(b"\n")
        out.flush()
        assert tail.poll() == ["third"]
    assert tail.generation == 0


def test_nothing_comes_until_the_file_appears(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    tail = tail_of(log)
    assert tail.poll() == []
    log.write_text("load_tensors: offloaded 33/33 layers to GPU\n")
    assert tail.poll() == ["load_tensors: offloaded 33/33 layers to GPU"]
    assert tail.poll() == []  # nothing new
    assert tail.generation == 0  # the first file it saw is not a new start


def test_a_truncated_file_starts_a_new_generation_from_its_top(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("ggml_cuda_init: failed to initialize CUDA: unknown error\n" * 3)
    tail = tail_of(log)
    assert len(tail.poll()) == 3
    log.write_text("load_tensors: offloaded 2/2 layers to GPU\n")  # the engine restarted
    assert tail.poll() == ["load_tensors: offloaded 2/2 layers to GPU"]
    assert tail.generation == 1


def test_a_replaced_file_starts_a_new_generation_even_when_longer(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 0/29 layers to GPU\n")
    tail = tail_of(log)
    tail.poll()
    new = tmp_path / "engine.log.new"
    new.write_text("x" * 200 + "\nload_tensors: offloaded 29/29 layers to GPU\n")
    os.replace(new, log)  # longer than what was read: only the inode tells
    assert tail.poll() == ["x" * 200, "load_tensors: offloaded 29/29 layers to GPU"]
    assert tail.generation == 1


def test_a_file_that_became_unreadable_is_skipped_quietly(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("first\n")
    tail = tail_of(log)
    assert tail.poll() == ["first"]
    log.unlink()
    log.mkdir()  # open() fails, as it does for a file this user may no longer read
    assert tail.poll() == []
    log.rmdir()
    log.write_text("again\n")
    assert tail.poll() == ["again"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_a_file_without_read_permission_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("first\n")
    tail = tail_of(log)
    assert tail.poll() == ["first"]
    with log.open("a") as out:
        out.write("second\n")
    log.chmod(0)
    try:
        assert tail.poll() == []
    finally:
        log.chmod(0o644)
    assert tail.poll() == ["second"]


def test_bytes_per_poll_and_line_length_are_capped(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"a" * 5000 + b"\n" + b"short\n" * 100)
    tail = tail_of(log, max_line=100)
    lines: list[str] = []
    for _ in range(20):
        got = tail.poll(1024)
        assert sum(len(x) + 1 for x in got) <= 1024 + 100
        lines += got
    assert lines[0] == "a" * 100
    assert lines[1:] == ["short"] * 100


def test_invalid_utf8_is_read_without_raising(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"\xff\xfe load_tensors: offloaded 3/4 layers to GPU\n")
    assert tail_of(log).poll() == ["\ufffd\ufffd load_tensors: offloaded 3/4 layers to GPU"]


def test_a_deleted_file_starts_a_new_generation(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 0/29 layers to GPU\n")
    tail = tail_of(log)
    assert tail.poll() == ["load_tensors: offloaded 0/29 layers to GPU"]
    log.unlink()
    assert tail.poll() == []
    assert tail.generation == 1  # what it said is no longer said
    assert tail.poll() == []
    assert tail.generation == 1  # once, not every look
    log.write_text("load_tensors: offloaded 29/29 layers to GPU\n")
    assert tail.poll() == ["load_tensors: offloaded 29/29 layers to GPU"]
    assert tail.generation == 1


def test_a_file_that_never_was_is_no_new_generation(tmp_path: Path) -> None:
    tail = tail_of(tmp_path / "later.log")
    assert tail.poll() == []
    assert tail.generation == 0


def test_a_large_file_first_followed_is_read_from_its_newest_life(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    old = "build: 4589 (eb7cf15a) with cc\nload_tensors: offloaded 0/33 layers to GPU\n"
    new = "build: 5400 (1a2b3c4d) with cc\nload_tensors: offloaded 33/33 layers to GPU\n"
    log.write_text(old + "srv  update_slots: all slots are idle\n" * 2000 + old + new)
    tail = LogTail(PathLog(str(log), os.getpid()), from_end=4096, start=newest_life)
    lines = tail.poll(1 << 20)
    assert lines[-2:] == new.splitlines()
    assert len(lines) <= 4096 // 38  # not the 2000 lines before: the last 4 KiB at most
    log.write_text("")  # a new generation of a small file is read from its top
    assert tail.poll() == []
    log.write_text(new)
    assert tail.poll() == new.splitlines()


def test_a_large_file_without_a_banner_is_read_from_a_whole_line_near_its_end(
    tmp_path: Path,
) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 7/33 layers to GPU\n" * 1000)
    lines = LogTail(PathLog(str(log), os.getpid()), from_end=1000).poll(1 << 20)
    assert lines and set(lines) == {"load_tensors: offloaded 7/33 layers to GPU"}
    assert len(lines) <= 1000 // 43
