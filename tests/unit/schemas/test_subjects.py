"""Subjects of the wire contract."""

from __future__ import annotations

from placewatch.schemas import subjects
from placewatch.schemas.streams import STREAMS

# --- covers(pattern, subject): NATS wildcard matching ---------------------------------------


def test_covers_a_literal_subject_only_with_the_same_tokens() -> None:
    assert subjects.covers("placewatch.telemetry.gpu-07", "placewatch.telemetry.gpu-07")
    assert not subjects.covers("placewatch.telemetry.gpu-07", "placewatch.telemetry.gpu-08")
    assert not subjects.covers("placewatch.telemetry", "placewatch.telemetry.gpu-07")
    assert not subjects.covers("placewatch.telemetry.gpu-07.x", "placewatch.telemetry.gpu-07")


def test_a_star_stands_for_exactly_one_token() -> None:
    assert subjects.covers("placewatch.telemetry.*", "placewatch.telemetry.gpu-07")
    assert subjects.covers("placewatch.telemetry.*", "placewatch.telemetry.*")
    assert not subjects.covers("placewatch.telemetry.*", "placewatch.telemetry")
    assert not subjects.covers("placewatch.compute.*", "placewatch.compute.gpu-07.llama-8b")


def test_a_tail_wildcard_stands_for_one_token_or_more() -> None:
    assert subjects.covers("placewatch.>", "placewatch.compute.gpu-07.llama-8b")
    assert subjects.covers("placewatch.compute.>", "placewatch.compute.gpu-07")
    assert subjects.covers(">", "placewatch")
    assert not subjects.covers("placewatch.compute.>", "placewatch.compute")


def test_a_wildcard_subject_is_covered_only_by_a_pattern_as_wide() -> None:
    assert subjects.covers("placewatch.>", "placewatch.compute.>")
    assert subjects.covers("placewatch.compute.>", "placewatch.compute.>")
    assert subjects.covers("placewatch.*.>", "placewatch.fallback.*.*")
    # `compute.>` takes subjects of any depth; a stream of `compute.*.*` would miss some.
    assert not subjects.covers("placewatch.compute.*.*", "placewatch.compute.>")
    assert not subjects.covers("placewatch.compute.*", "placewatch.compute.>")
    assert not subjects.covers("placewatch.telemetry.gpu-07", "placewatch.telemetry.*")


def test_each_contract_stream_covers_what_the_worker_publishes_to_it() -> None:
    streams = {s.name: s.subjects("placewatch") for s in STREAMS}
    published = {
        subjects.STREAM_TELEMETRY: [subjects.telemetry("gpu node.1")],
        subjects.STREAM_EVENTS: [
            subjects.compute("gpu-07", "llama-8b"),
            subjects.fallback("gpu-07", "llama-8b"),
        ],
    }
    for name, sent in published.items():
        for subject in sent:
            assert any(subjects.covers(p, subject) for p in streams[name]), (name, subject)
    assert not any(
        subjects.covers(p, subjects.telemetry("gpu-07")) for p in streams[subjects.STREAM_EVENTS]
    )
