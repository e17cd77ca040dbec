"""The requests an engine's log shows: when each ran, by the worker's clock.

A real llama-server b11434 log with three requests (tests/fixtures/serving); Ollama's gin
line from a real log in the shared corpus; the keyed and JSON formats of early-2024 builds
written inline from their published format, constructed.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.engines.evidence.serving import (
    KEEP_S,
    Request,
    Serving,
    ServingLog,
)

from tests.conftest import CORPUS, FIXTURES, needs_corpus

CAPTURE = FIXTURES / "serving" / "llamacpp-b11434-serving.log"


def read(
    lines: list[str], start: float = 100.0, step: float = 1.0, history: bool = False
) -> Serving:
    """Each line read `step` seconds after the one before."""
    log = ServingLog()
    for n, line in enumerate(lines):
        log.read(line, start + n * step, history)
    return log.snapshot()


def test_the_real_llama_server_log_shows_three_requests_with_their_times() -> None:
    lines = CAPTURE.read_text().splitlines()
    serving = read(lines)
    assert serving.engine == "llama.cpp" and serving.seen
    at = {n: 100.0 + i for i, n in enumerate(lines)}
    launch = [at[line] for line in lines if "launch_slot_" in line]
    totals = [at[line] for line in lines if "total time" in line]
    # Each ends at its print_timing line, with the engine's own total time.
    assert serving.requests == (
        Request(launch[0], totals[0], pytest.approx(0.01799)),  # type: ignore[arg-type]
        Request(launch[2], totals[1], pytest.approx(0.02923)),  # type: ignore[arg-type]
        Request(launch[1], totals[2], pytest.approx(0.06565)),  # type: ignore[arg-type]
    )


def test_a_request_launched_and_not_finished_is_running() -> None:
    launched = [line for line in CAPTURE.read_text().splitlines() if "launch_slot_" in line][:1]
    serving = read(launched, start=50.0)
    assert serving.requests == (Request(50.0),)
    assert serving.since(1000.0) == [Request(50.0)]  # running now, however long ago it began


def test_a_finished_request_is_in_a_window_that_reaches_its_end() -> None:
    serving = Serving(requests=(Request(10.0, 20.0), Request(25.0, 26.0)))
    assert serving.since(21.0) == [Request(25.0, 26.0)]
    assert serving.since(19.0) == list(serving.requests)


def test_history_finishes_nothing_and_what_it_left_running_counts_from_then() -> None:
    lines = CAPTURE.read_text().splitlines()
    finished = read(lines, history=True)
    assert finished.requests == () and finished.seen  # the engine prints requests: count 0
    cut = lines[: lines.index(next(x for x in lines if "task 33 | processing" in x)) + 1]
    running = read(cut, start=7.0, step=0.0, history=True)
    assert running.requests == (Request(7.0),)


def test_the_keyed_and_json_formats_of_early_2024_builds() -> None:
    # Constructed in the format llama-server printed in early 2024 (and ik_llama.cpp does).
    lines = [
        'INFO [   launch_slot_with_task] slot is processing task | tid="1398" timestamp=1 '
        "id_slot=0 id_task=0",
        'INFO [            update_slots] slot released | tid="1398" timestamp=9 id_slot=0 '
        "id_task=0 n_ctx=4096 n_past=60 n_system_tokens=0 n_cache_tokens=0 truncated=false",
        '{"tid":"1398","timestamp":10,"level":"INFO","function":"launch_slot_with_task",'
        '"line":1,"msg":"slot is processing task","id_slot":1,"id_task":2}',
    ]
    serving = read(lines, start=0.0)
    assert serving.requests == (Request(0.0, 1.0), Request(2.0))


@needs_corpus
def test_ollamas_gin_line_from_a_real_log() -> None:
    log = CORPUS / "engine-logs" / "ollama-no-kernel-image-arch-mismatch-2025-07.log"
    (line,) = [x for x in log.read_text().splitlines() if "[GIN]" in x]
    serving = read([line], start=500.0)
    assert serving.engine == "ollama"
    (request,) = serving.requests
    assert request.ended == 500.0 and request.busy_s == pytest.approx(6.234077207)
    assert request.started == pytest.approx(500.0 - 6.234077207)


@pytest.mark.parametrize(
    "line",
    [
        '[GIN] 2024/07/05 - 02:36:55 | 200 |     196.452µs |       127.0.0.1 | GET      "/api/version"',
        '[GIN] 2024/07/05 - 02:37:04 | 200 |  275.807699ms |       127.0.0.1 | POST     "/api/show"',
        '[GIN] 2025/07/02 - 14:20:13 | 500 |  6.234077207s |       127.0.0.1 | POST     "/api/chat"',
    ],
)
def test_ollama_lines_that_ran_no_model_are_not_requests(line: str) -> None:
    assert read([line]).requests == ()


def test_ollama_endpoints_that_run_a_model() -> None:
    lines = [
        f'[GIN] 2025/10/01 - 10:00:00 | 200 |  1.5s |  10.0.0.2 | POST     "{path}"'
        for path in ("/api/chat", "/v1/chat/completions", "/api/embed", "/v1/completions")
    ]
    assert len(read(lines).requests) == 4


def test_finished_requests_are_kept_for_a_while_and_no_more() -> None:
    lines = CAPTURE.read_text().splitlines()
    launch = next(x for x in lines if "launch_slot_" in x)
    release = next(x for x in lines if "release:" in x and "task 0 " in x)
    log = ServingLog()
    log.read(launch, 0.0)
    log.read(release, 1.0)
    log.read(launch, KEEP_S + 10.0)
    log.read(release, KEEP_S + 11.0)
    assert log.snapshot().requests == (Request(KEEP_S + 10.0, KEEP_S + 11.0),)


def test_a_total_time_that_is_no_number_ends_nothing_and_raises_nothing() -> None:
    # Anyone who can write the log writes this line; the release line still ends the request.
    lines = [
        "slot launch_slot_: id  3 | task 0 | processing task, is_child = 0",
        "slot print_timing: id  3 | task 0 |   total time = 1.2.3 ms /  34 tokens",
        "slot      release: id  3 | task 0 | stop processing: n_tokens = 33, truncated = 0",
    ]
    assert read(lines, start=0.0).requests == (Request(0.0, 2.0),)


@given(st.lists(st.text(max_size=300), max_size=30))
def test_any_lines_read_without_raising(lines: list[str]) -> None:
    serving = read(lines)
    for request in serving.requests:
        assert request.ended is None or request.ended >= request.started


@given(st.lists(st.sampled_from(CAPTURE.read_text().splitlines()), max_size=60))
def test_any_order_of_real_lines_gives_sane_requests(lines: list[str]) -> None:
    serving = read(lines)
    assert len([r for r in serving.requests if r.ended is None]) <= 2  # two slots
    for request in serving.requests:
        assert request.ended is None or request.ended >= request.started
        assert request.busy_s is None or request.busy_s >= 0
