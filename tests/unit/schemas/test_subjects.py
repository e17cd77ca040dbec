"""Every subject, wildcard and KV key of the contract, and the token rule."""

from __future__ import annotations

import pytest

from placewatch.schemas import subjects
from placewatch.schemas.streams import STREAMS


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu-01", "gpu-01"),
        ("gpu.node.1", "gpu_node_1"),
        ("a b*c>d", "a_b_c_d"),
        ("llama_8b-A", "llama_8b-A"),
        ("nœud", "n_ud"),
        ("", "_"),
    ],
)
def test_token_replaces_everything_outside_the_token_alphabet(name: str, expected: str) -> None:
    assert subjects.token(name) == expected


def test_a_node_publishes_on_subjects_of_its_name_as_a_token() -> None:
    assert subjects.telemetry("gpu.01") == "placewatch.telemetry.gpu_01"
    assert subjects.compute("n1", "llama 8b") == "placewatch.compute.n1.llama_8b"
    assert subjects.fallback("n1", "s", prefix="pw") == "pw.fallback.n1.s"
    assert subjects.service("rack 4") == "placewatch.service.rack_4"
    assert subjects.service("n", prefix="pw") == "pw.service.n"


def test_a_nodes_replies_come_under_its_own_inbox_prefix() -> None:
    assert subjects.inbox("gpu.07") == "_INBOX.gpu_07"


def test_consumers_subscribe_to_wildcards_under_the_prefix() -> None:
    assert subjects.all_telemetry() == "placewatch.telemetry.*"
    assert subjects.all_compute("pw") == "pw.compute.>"
    assert subjects.all_fallback("pw") == "pw.fallback.>"
    assert subjects.all_events("pw") == ["pw.compute.>", "pw.fallback.>"]


def test_kv_keys_and_the_subjects_they_travel_on() -> None:
    assert subjects.shard_key("n.1", "s>") == "n_1.s_"
    assert subjects.node_keys("gpu 07") == "gpu_07.*"
    assert subjects.kv_stream(subjects.BUCKET_PLACEMENTS) == "KV_placewatch_placements"
    assert subjects.kv_prefix("b") == "$KV.b."
    assert subjects.kv_subject("b") == "$KV.b.>"
    assert subjects.kv_subject("b", "n1.*") == "$KV.b.n1.*"
    assert subjects.KV_DELETED == ("DEL", "PURGE")


def test_stream_and_bucket_names_and_the_local_default() -> None:
    assert subjects.STREAM_EVENTS == "PLACEWATCH_EVENTS"
    assert subjects.STREAM_TELEMETRY == "PLACEWATCH_TELEMETRY"
    assert subjects.BUCKET_PLACEMENTS == "placewatch_placements"
    assert subjects.BUCKET_COMPUTE == "placewatch_compute"
    assert subjects.LOCAL_URL == "nats://127.0.0.1:4222"


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
