"""The table of streams and buckets: their names and what each holds under a prefix, and the
NATS CLI command an operator runs to make each as the worker would."""

from __future__ import annotations

import nats.js.errors
import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.schemas import partitions, streams
from placewatch.schemas.streams import (
    BUCKET_KINDS,
    BUCKETS,
    COMPUTE,
    EVENTS,
    INVENTORY,
    LEASES,
    PLACEMENTS,
    STREAM_KINDS,
    STREAMS,
    TELEMETRY,
    Stream,
    bucket_name,
    consumers_refused,
    for_prefix,
    per_node,
    stem,
    stream_name,
)


def names(prefix: str) -> list[str]:
    stores = for_prefix(prefix)
    return [s.name for s in stores.streams] + [b.name for b in stores.buckets]


def test_the_default_prefix_keeps_every_name_it_always_had() -> None:
    assert names("placewatch") == [
        "PLACEWATCH_EVENTS",
        "PLACEWATCH_TELEMETRY",
        "PLACEWATCH_INVENTORY",
        "placewatch_placements",
        "placewatch_compute",
        "placewatch_leases",
    ]
    assert for_prefix() == for_prefix("placewatch")
    assert (
        for_prefix().events,
        for_prefix().telemetry,
        for_prefix().inventory,
        for_prefix().placements,
        for_prefix().compute,
        for_prefix().leases,
    ) == (EVENTS, TELEMETRY, INVENTORY, PLACEMENTS, COMPUTE, LEASES)


def test_another_prefix_names_its_own_streams_and_buckets_with_each_dot_an_underscore() -> None:
    assert names("acme.pw") == [
        "ACME_PW_EVENTS",
        "ACME_PW_TELEMETRY",
        "ACME_PW_INVENTORY",
        "acme_pw_placements",
        "acme_pw_compute",
        "acme_pw_leases",
    ]
    assert names("site-2.gpu") == [
        "SITE-2_GPU_EVENTS",
        "SITE-2_GPU_TELEMETRY",
        "SITE-2_GPU_INVENTORY",
        "site-2_gpu_placements",
        "site-2_gpu_compute",
        "site-2_gpu_leases",
    ]
    assert [b.stream for b in for_prefix("acme.pw").buckets] == [
        "KV_acme_pw_placements",
        "KV_acme_pw_compute",
        "KV_acme_pw_leases",
    ]


_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)
_PREFIX = st.lists(_TOKEN, min_size=1, max_size=4).map(".".join)


@given(_PREFIX, _PREFIX)
def test_two_prefixes_never_share_a_name(a: str, b: str) -> None:
    if a != b:
        assert not set(names(a)) & set(names(b))
    # And a name gives its prefix back: the stem, with each `_` a dot.
    assert stem(a).replace("_", ".") == a
    assert for_prefix(a).events.name.removesuffix("_EVENTS").lower().replace("_", ".") == a


@pytest.mark.parametrize(
    "prefix",
    ["Placewatch", "acme_pw", "acme..pw", ".pw", "pw.", "pw.*", "pw.>", "p w", "pw/x", "", "ü"],
)
def test_a_prefix_the_rule_cannot_map_is_refused_naming_it_and_what_to_give(prefix: str) -> None:
    with pytest.raises(ValueError) as caught:
        for_prefix(prefix)
    assert str(caught.value) == (
        f"subject prefix {prefix!r} cannot name streams and buckets: give a prefix of at most "
        "64 characters, one or more tokens joined by dots, each of lowercase letters a-z, "
        "digits and '-' (such as 'placewatch' or 'acme.pw'); docs/subjects.md, Streams and "
        "buckets"
    )


def test_a_prefix_longer_than_64_characters_is_refused() -> None:
    assert stem("a" * 64) == "a" * 64
    with pytest.raises(ValueError, match="at most 64 characters"):
        stem("a" * 65)


def test_the_events_stream_takes_compute_and_fallback_under_the_prefix() -> None:
    assert EVENTS.subjects == ("placewatch.compute.>", "placewatch.fallback.>")
    assert for_prefix("pw").events.subjects == ("pw.compute.>", "pw.fallback.>")


def test_the_telemetry_stream_takes_each_node_as_published_and_as_partitioned() -> None:
    assert TELEMETRY.subjects == ("placewatch.telemetry.*", "placewatch.telemetry.*.*")
    assert for_prefix("acme.pw").telemetry.subjects == (
        "acme.pw.telemetry.*",
        "acme.pw.telemetry.*.*",
    )


def test_the_events_command_sets_the_duplicate_window_in_minutes() -> None:
    assert for_prefix("pw").events.command("file", 3) == (
        "nats stream add PW_EVENTS --subjects 'pw.compute.>,pw.fallback.>' "
        "--storage file --replicas 3 --dupe-window 5m --max-consumers 1000000 --defaults"
    )


def test_the_telemetry_command_keeps_one_message_per_subject() -> None:
    assert TELEMETRY.command("memory", 1) == (
        "nats stream add PLACEWATCH_TELEMETRY "
        "--subjects 'placewatch.telemetry.*,placewatch.telemetry.*.*' "
        "--storage memory --replicas 1 --max-msgs-per-subject 1 --max-consumers 1000000 --defaults"
    )


def test_a_window_that_is_not_whole_minutes_is_written_as_a_fraction() -> None:
    stream = Stream("S", ("p.compute.>",), "test", duplicate_window_s=90.0)
    assert stream.command("file", 1) == (
        "nats stream add S --subjects 'p.compute.>' "
        "--storage file --replicas 1 --dupe-window 1.5m --max-consumers 1000000 --defaults"
    )


def test_a_bucket_command_and_the_stream_that_holds_it() -> None:
    assert PLACEMENTS.command("file", 1) == (
        "nats kv add placewatch_placements --history 1 --storage file --replicas 1"
        " && nats stream edit KV_placewatch_placements --max-consumers 1000000 -f"
    )
    assert COMPUTE.command("memory", 3) == (
        "nats kv add placewatch_compute --history 1 --storage memory --replicas 3"
        " && nats stream edit KV_placewatch_compute --max-consumers 1000000 --no-allow-rollup -f"
    )
    assert for_prefix("acme.pw").leases.command("file", 3) == (
        "nats kv add acme_pw_leases --history 1 --storage file --replicas 3"
        " && nats stream edit KV_acme_pw_leases --max-consumers 1000000 --no-allow-rollup -f"
    )
    assert (PLACEMENTS.stream, COMPUTE.stream, LEASES.stream) == (
        "KV_placewatch_placements",
        "KV_placewatch_compute",
        "KV_placewatch_leases",
    )


def test_buckets_every_node_writes_take_no_rollup() -> None:
    # One node's `Nats-Rollup: all` on its own key would wipe every other node's keys.
    assert (PLACEMENTS.rollup, COMPUTE.rollup, LEASES.rollup) == (True, False, False)
    assert LEASES.command("file", 3) == (
        "nats kv add placewatch_leases --history 1 --storage file --replicas 3"
        " && nats stream edit KV_placewatch_leases --max-consumers 1000000 --no-allow-rollup -f"
    )


def test_a_refused_consumer_says_which_stream_and_the_edit_that_raises_its_limit() -> None:
    refused = nats.js.errors.BadRequestError(
        code=400, err_code=10026, description="maximum consumers limit reached"
    )
    assert consumers_refused(refused, "KV_placewatch_placements") == (
        "stream KV_placewatch_placements has as many consumers as its limit allows "
        "(nats-server 2.15 gives a stream made without a limit 1,000, and every worker holds one "
        "on the placements bucket): raise it with "
        "`nats stream edit KV_placewatch_placements --max-consumers 1000000 -f`"
    )
    other = nats.js.errors.BadRequestError(code=400, err_code=10012, description="bad request")
    assert consumers_refused(other, "S") is None
    assert consumers_refused(TimeoutError(), "S") is None


def test_the_table_lists_each_stream_and_bucket_once() -> None:
    assert [s.name for s in STREAMS] == [
        "PLACEWATCH_EVENTS",
        "PLACEWATCH_TELEMETRY",
        "PLACEWATCH_INVENTORY",
    ]
    assert [b.name for b in BUCKETS] == [
        "placewatch_placements",
        "placewatch_compute",
        "placewatch_leases",
    ]
    assert (EVENTS.duplicate_window_s, EVENTS.max_msgs_per_subject) == (300.0, None)
    assert (TELEMETRY.duplicate_window_s, TELEMETRY.max_msgs_per_subject) == (None, 1)
    assert (INVENTORY.duplicate_window_s, INVENTORY.max_msgs_per_subject) == (None, 1)
    assert for_prefix("pw").inventory.subjects == ("pw.inventory.*", "pw.inventory.*.*")


def test_a_name_is_a_function_of_the_prefix_and_the_kind() -> None:
    assert stream_name("placewatch", "events") == "PLACEWATCH_EVENTS"
    assert stream_name("acme.pw", "inventory") == "ACME_PW_INVENTORY"
    assert bucket_name("site-2.gpu", "leases") == "site-2_gpu_leases"
    stores = for_prefix("acme.pw")
    assert [s.name for s in stores.streams] == [
        stream_name("acme.pw", k.kind) for k in STREAM_KINDS
    ]
    assert [b.name for b in stores.buckets] == [
        bucket_name("acme.pw", k.kind) for k in BUCKET_KINDS
    ]


@pytest.mark.parametrize("kind", ["", "Events", "in_ventory", "kv2", "a.b"])
def test_a_kind_is_lowercase_letters_only(kind: str) -> None:
    with pytest.raises(ValueError) as caught:
        stream_name("placewatch", kind)
    assert str(caught.value) == f"kind {kind!r}: give lowercase letters a-z only"


def test_a_new_per_node_kind_is_one_line_and_follows_the_partitions_only_if_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    health = per_node("health", "the health of each node")
    stream = health.at("acme.pw")
    assert (stream.name, stream.subjects, stream.max_msgs_per_subject) == (
        "ACME_PW_HEALTH",
        ("acme.pw.health.*",),
        1,
    )
    monkeypatch.setattr(partitions, "PARTITIONED", (*partitions.PARTITIONED, "health"))
    assert health.at("acme.pw").subjects == ("acme.pw.health.*", "acme.pw.health.*.*")
    monkeypatch.setattr(streams, "STREAM_KINDS", (*STREAM_KINDS, health))
    for_prefix.cache_clear()
    try:
        assert [s.name for s in for_prefix("acme.pw").streams] == [
            "ACME_PW_EVENTS",
            "ACME_PW_TELEMETRY",
            "ACME_PW_INVENTORY",
            "ACME_PW_HEALTH",
        ]
    finally:
        for_prefix.cache_clear()


_KIND = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10)


@given(_PREFIX, _KIND, _PREFIX, _KIND)
def test_two_prefix_and_kind_pairs_never_share_a_name(a: str, j: str, b: str, k: str) -> None:
    if (a, j) != (b, k):
        assert stream_name(a, j) != stream_name(b, k)
        assert bucket_name(a, j) != bucket_name(b, k)
