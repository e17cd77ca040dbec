"""A file an operator names is read without blocking, whole or not at all, and only when it
is a regular file of UTF-8 text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from placewatch.worker.files import UnusableFile, read_text


def test_a_regular_file_is_read_whole_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_text('node = "é"\n' + "#" * 2_000_000)  # more than one read's worth
    size = path.stat().st_size
    assert read_text(path, size) == path.read_text()
    with pytest.raises(UnusableFile) as raised:
        read_text(path, size - 1)
    assert str(raised.value) == f"is larger than {size - 1:,} bytes"


def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UnusableFile) as raised:
        read_text(fifo, 1 << 20)  # opening it for reading would block without O_NONBLOCK
    assert str(raised.value) == "is a named pipe; give the path of a file"


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), ("/", "a directory")]
)
def test_what_is_not_a_regular_file_is_named(path: str, kind: str) -> None:
    with pytest.raises(UnusableFile) as raised:
        read_text(path, 1 << 20)
    assert str(raised.value) == f"is {kind}; give the path of a file"


def test_a_missing_file_says_the_systems_reason(tmp_path: Path) -> None:
    with pytest.raises(UnusableFile) as raised:
        read_text(tmp_path / "absent", 10)
    assert str(raised.value) == "cannot be read (No such file or directory)"


def test_bytes_that_are_not_utf8_are_pointed_at(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_bytes(b'id = "a\xffb"\n')
    with pytest.raises(UnusableFile) as raised:
        read_text(path, 100)
    assert str(raised.value) == "is not UTF-8 text (byte 0xff at offset 7)"
