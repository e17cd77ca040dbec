"""Any bytes a log holds, through the path every followed log takes (LogTail, Unwrap, the
evidence reader and the requests' reader, as EngineLogs runs them): never an exception,
a read in bounded time, and every structure they feed within its bound."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.worker.engines.evidence.follow import _Followed, _read_all
from placewatch.worker.engines.evidence.lives import MAX_BEFORE, newest_life
from placewatch.worker.engines.evidence.read import MAX_LINES
from placewatch.worker.engines.evidence.rules import MAX_LINE_CHARS
from placewatch.worker.engines.evidence.serving import MAX_REQUESTS, MAX_RUNNING
from placewatch.worker.engines.evidence.source import PathLog
from placewatch.worker.engines.evidence.tail import LogTail
from placewatch.worker.engines.evidence.unwrap import MAX_JOINED, MAX_STREAMS

from tests.conftest import examples

MAX_LINE = 4096
FROM_END = 8192

PIECES = st.sampled_from(
    [
        b"\n",
        b"\r\n",
        b"\x00" * 64,
        b"\xff\xfe\xc3",
        b"\x1b[31m",
        "\u202e".encode(),
        b"2026-12-06T05:31:02.123456789Z stderr P ",
        b"2026-12-06T05:31:02.123456789Z stdout F ",
        b'{"log":"',
        b'\\n","stream":"',
        b'","time":"2026-12-06T05:31:02Z"}',
        b'{"type":"log","msg":"',
        b"build: 5400 (1a2b3c4d) with cc",
        b"0.00.004.346 I srv  llama_server: initializing ...",
        b"ggml_cuda_init: found 1 CUDA devices:",
        b"load_tensors: offloaded 3/33 layers to GPU",
        b"ggml_cuda_init: failed to initialize CUDA: unknown error",
        b"0.03.049.435 I slot launch_slot_: id 7 | task 1 | processing task",
        b"slot print_timing: id 7 | task 1 | total time = 4.17 ms / 34 tokens",
        b"CUDA0 model buffer size = 12.00 MiB",
        b"x" * 5000,
    ]
)
WRITE = st.lists(st.one_of(st.binary(max_size=300), PIECES), max_size=120).map(b"".join)
"""What an engine (or anyone who may write its log) appends between two looks."""


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(WRITE, min_size=1, max_size=5))
def test_any_bytes_are_read_in_bounded_time_within_every_bound_and_never_raise(
    writes: list[bytes],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "engine.log"
        log.write_bytes(b"")
        source = PathLog(str(log), os.getpid())
        followed = _Followed(
            LogTail(source, max_line=MAX_LINE, from_end=FROM_END, start=newest_life)
        )
        for turn, data in enumerate(writes):
            with log.open("ab") as out:
                out.write(data)
            started = time.monotonic()
            _read_all([followed], started + 10, turn)
            assert time.monotonic() - started < 2
            assert followed.tail.behind == 0
            said = followed.answer()
            serving = followed.serving.snapshot()
            assert len(said.lines) <= MAX_LINES
            assert all(len(line) <= MAX_LINE_CHARS for line in said.lines)
            assert len(serving.requests) <= MAX_RUNNING + MAX_REQUESTS
            # What each holds between looks, which nothing public shows.
            assert isinstance(followed.tail, LogTail)
            assert len(followed.tail._partial) <= MAX_LINE
            assert len(followed.unwrap._parts) <= MAX_STREAMS
            assert all(len(p) <= MAX_JOINED for p in followed.unwrap._parts.values())
            assert len(followed.reader.lives._before) <= MAX_BEFORE
