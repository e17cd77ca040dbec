"""What `placewatch alerts` logs of the messages it skips: not one line each."""

from __future__ import annotations

import logging

import pytest

from placewatch.consumer.alerts.skipped import LOGGED, Skipped

WHY = "it names node 'gpu-07', not its subject's"


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.endswith("alerts.skipped")]


def test_a_subject_logs_its_first_skip_then_the_10th_100th_and_1000th(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skipped = Skipped()
    with caplog.at_level(logging.ERROR):
        for seq in range(1, 1201):
            skipped.skip(seq, "placewatch.fallback.gpu-08.a", WHY)
    assert logged(caplog) == [
        f"skipped message 1 on placewatch.fallback.gpu-08.a: {WHY}",
        f"skipped message 10 on placewatch.fallback.gpu-08.a: {WHY} "
        "(10 skipped on this subject; logged at 1, 10, 100 ...)",
        f"skipped message 100 on placewatch.fallback.gpu-08.a: {WHY} "
        "(100 skipped on this subject; logged at 1, 10, 100 ...)",
        f"skipped message 1000 on placewatch.fallback.gpu-08.a: {WHY} "
        "(1000 skipped on this subject; logged at 1, 10, 100 ...)",
    ]
    assert skipped.by_subject == {"placewatch.fallback.gpu-08.a": 1200}


def test_each_subject_logs_its_own_first_skip(caplog: pytest.LogCaptureFixture) -> None:
    skipped = Skipped()
    with caplog.at_level(logging.ERROR):
        skipped.skip(1, "placewatch.fallback.gpu-08.a", WHY)
        skipped.skip(2, "placewatch.fallback.gpu-08.b", "not a valid FallbackEvent")
        skipped.skip(3, "placewatch.fallback.gpu-08.a", WHY)
    assert logged(caplog) == [
        f"skipped message 1 on placewatch.fallback.gpu-08.a: {WHY}",
        "skipped message 2 on placewatch.fallback.gpu-08.b: not a valid FallbackEvent",
    ]
    assert skipped.by_subject == {
        "placewatch.fallback.gpu-08.a": 2,
        "placewatch.fallback.gpu-08.b": 1,
    }


def test_subjects_past_the_first_256_share_one_count_and_its_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skipped = Skipped()
    with caplog.at_level(logging.ERROR):
        for n in range(LOGGED + 100):  # a shard token each, as a node may make without end
            skipped.skip(n + 1, f"placewatch.fallback.gpu-08.s{n}", WHY)
    lines = logged(caplog)
    assert len(lines) == LOGGED + 3  # the first 256 subjects' first; then the 1st, 10th, 100th
    assert lines[LOGGED] == (
        f"skipped message {LOGGED + 1} on placewatch.fallback.gpu-08.s{LOGGED}: {WHY} "
        f"(1 skipped on subjects past the first {LOGGED}; logged at 1, 10, 100 ...)"
    )
    assert lines[LOGGED + 1] == (
        f"skipped message {LOGGED + 10} on placewatch.fallback.gpu-08.s{LOGGED + 9}: {WHY} "
        f"(10 skipped on subjects past the first {LOGGED}; logged at 1, 10, 100 ...)"
    )
    assert len(skipped.by_subject) == LOGGED
    assert skipped.elsewhere == 100


def test_a_hostile_subject_is_logged_as_its_escapes(caplog: pytest.LogCaptureFixture) -> None:
    subject = "placewatch.fallback.gpu\x1b]0;pwned\x07\u202e.a\nforged line"
    with caplog.at_level(logging.ERROR):
        Skipped().skip(1, subject, "it names node 'x\x1b'")
    assert logged(caplog) == [
        r"skipped message 1 on placewatch.fallback.gpu\x1b]0;pwned\x07\u202e.a\nforged line: "
        r"it names node 'x\x1b'"
    ]
