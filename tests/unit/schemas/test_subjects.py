"""Every subject, wildcard and KV key of the contract, and the token rule."""

from __future__ import annotations

import pytest

from placewatch.schemas import partitions, subjects
from placewatch.schemas.streams import EVENTS, STREAMS, TELEMETRY


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu-01", "gpu-01"),
        ("llama_8b-A", "llama_8b-A"),
        ("llama-3.1-8b", "llama-3=2E1-8b"),
        ("a.b", "a=2Eb"),
        ("a_b", "a_b"),
        ("a=2Eb", "a=3D2Eb"),
        ("a b*c>d", "a=20b=2Ac=3Ed"),
        ("..", "=2E=2E"),
        ("nœud", "n=C5=93ud"),
        ("日本", "=E6=97=A5=E6=9C=AC"),
        ("$KV", "=24KV"),
        ("gpu-01\n", "gpu-01=0A"),
        ("gpu\u0661", "gpu=D9=A1"),  # a digit, but not one of the safe set's
    ],
)
def test_a_name_outside_the_safe_set_is_written_one_byte_at_a_time(
    name: str, expected: str
) -> None:
    assert subjects.token(name) == expected
    assert subjects.name(expected) == name


def test_names_that_the_first_rule_wrote_alike_have_tokens_of_their_own() -> None:
    names = ["a.b", "a_b", "a*b", "a>b", "a b", "a=b", "a\u00b7b", "a\u2024b", "..", "_."]
    assert len({subjects.token(n) for n in names}) == len(names)
    assert len({subjects.shard_key("gpu.1", n) for n in names}) == len(names)
    assert subjects.shard_key("gpu.1", "x") != subjects.shard_key("gpu_1", "x")


@pytest.mark.parametrize("text", ["", "a.b", "a=2e", "a=4", "=41", "=FF", "a b", "a=3"])
def test_text_that_no_name_gives_is_refused_as_a_token(text: str) -> None:
    with pytest.raises(ValueError, match="token"):
        subjects.name(text)


def test_an_empty_name_has_no_token() -> None:
    with pytest.raises(ValueError, match="an empty name has no subject token"):
        subjects.token("")


def test_a_node_publishes_on_subjects_of_its_name_as_a_token() -> None:
    assert subjects.telemetry("gpu.01") == "placewatch.telemetry.gpu=2E01"
    assert subjects.compute("n1", "llama 8b") == "placewatch.compute.n1.llama=208b"
    assert subjects.fallback("n1", "s", prefix="pw") == "pw.fallback.n1.s"
    assert subjects.service("rack 4") == "placewatch.service.rack=204"
    assert subjects.service("n", prefix="pw") == "pw.service.n"


@pytest.mark.parametrize(
    ("subject", "node", "shard", "carried"),
    [
        ("placewatch.telemetry.gpu-07", "gpu-07", None, True),
        ("placewatch.telemetry.3.gpu-07", "gpu-07", None, True),  # mapped to a partition
        ("placewatch.telemetry.gpu-07", "gpu-08", None, False),
        ("placewatch.telemetry.xgpu-07", "gpu-07", None, False),  # a token that ends alike
        ("placewatch.telemetry.a=2Eb", "a.b", None, True),
        ("placewatch.telemetry.a=2Eb", "a_b", None, False),
        ("placewatch.telemetry.a_b", "a.b", None, False),
        ("placewatch.compute.n1.llama=208b", "n1", "llama 8b", True),
        ("placewatch.compute.n1.llama=208b", "n2", "llama 8b", False),
        ("placewatch.compute.n1.llama=208b", "n1", "llama", False),
        ("placewatch.fallback.n1.s", "n1", "s", True),
        ("$KV.placewatch_compute.n1.s", "n1", "s", True),
        ("$KV.placewatch_leases.n1", "n1", None, True),
        ("n1.s", "n1", "s", True),  # a bucket's key, as its reader is given it
        ("n1", "n1", None, True),
        ("placewatch.telemetry.gpu-07", "", None, False),
        ("placewatch.compute.n1.s", "n1", "", False),
        # A token more or less than the contract's: nobody's subject.
        ("placewatch.fallback.gpu-07.gpu-08.llm", "gpu-08", "llm", False),
        ("placewatch.compute.gpu-07.gpu-08.llm", "gpu-08", "llm", False),
        ("$KV.placewatch_compute.gpu-07.gpu-08.llm", "gpu-08", "llm", False),
        ("$KV.placewatch_compute.n1.s", "s", None, False),
        ("placewatch.telemetry.gpu-07.gpu-08", "gpu-08", None, False),
        ("placewatch.compute.gpu-08", "gpu-08", None, False),  # a kind of shards, no shard
        ("placewatch.telemetry.gpu-08.s", "gpu-08", "s", False),  # a kind of nodes, a shard
        ("placewatch.forgotten.3.gpu-08", "gpu-08", None, False),  # not a kind partitioned
        ("placewatch.inventory.3.gpu-08", "gpu-08", None, True),
    ],
)
def test_a_subject_carries_messages_about_the_node_and_shard_where_the_contract_puts_them(
    subject: str, node: str, shard: str | None, carried: bool
) -> None:
    assert subjects.carries(subject, node, shard) is carried


def test_a_nodes_replies_come_under_its_own_inbox_prefix() -> None:
    assert subjects.inbox("gpu.07") == "_INBOX.gpu=2E07"


def test_consumers_subscribe_to_wildcards_under_the_prefix() -> None:
    assert subjects.all_compute("pw") == "pw.compute.>"
    assert subjects.all_fallback("pw") == "pw.fallback.>"
    assert subjects.all_events("pw") == ["pw.compute.>", "pw.fallback.>"]


def test_kv_keys_and_the_subjects_they_travel_on() -> None:
    assert subjects.shard_key("n.1", "s>") == "n=2E1.s=3E"
    assert subjects.node_keys("gpu 07") == "gpu=2007.>"
    assert subjects.kv_stream("placewatch_placements") == "KV_placewatch_placements"
    assert subjects.kv_prefix("b") == "$KV.b."
    assert subjects.kv_subject("b") == "$KV.b.>"
    assert subjects.kv_subject("b", "n1.*") == "$KV.b.n1.*"
    assert subjects.KV_DELETED == ("DEL", "PURGE")


def test_the_local_default() -> None:
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
    streams = {s.name: s.subjects for s in STREAMS}
    published = {
        TELEMETRY.name: [
            subjects.telemetry("gpu node.1"),
            partitions.mapped("telemetry", "gpu node.1", 4),
        ],
        EVENTS.name: [
            subjects.compute("gpu-07", "llama-8b"),
            subjects.fallback("gpu-07", "llama-8b"),
        ],
    }
    for name, sent in published.items():
        for subject in sent:
            assert any(subjects.covers(p, subject) for p in streams[name]), (name, subject)
    assert not any(subjects.covers(p, subjects.telemetry("gpu-07")) for p in streams[EVENTS.name])
