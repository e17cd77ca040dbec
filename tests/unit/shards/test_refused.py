"""A refused placement answered on its own key: which shard a refusal names, and its status
until the placement is mended or removed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from placewatch.schemas import PlacementSpec
from placewatch.worker.shards import refused
from placewatch.worker.shards.placements import ShardsFile
from placewatch.worker.shards.refused import RefusedValues, refused_values, shard_of_key

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "shard"),
    [
        ("n1.llama-8b", "llama-8b"),
        ("n1.llama-3=2E1-8b", "llama-3.1-8b"),  # a name that is not a token as it is
        ("n1.a.b", None),  # two tokens: no shard's key
        ("n1.=2", None),  # no name's token
        ("n2.llama-8b", None),  # another node's
        ("n1.", None),
    ],
)
def test_the_shard_a_placements_key_names(key: str, shard: str | None) -> None:
    assert shard_of_key("n1", key) == shard


def test_a_shards_file_entry_refused_for_its_values_is_named_by_the_id_it_gives(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shards.toml"
    path.write_text(
        '[[shard]]\nid = "ok"\npid = 1\n\n'
        '[[shard]]\nid = "typo"\npid = 2\ngpu = [0]\n\n'
        "[[shard]]\npid = 3\n\n"  # no id: nothing to answer on
        '[[shard]]\nid = "ok"\npid = 4\ngpus = "zero"\n\n'  # its id is the valid entry's
        "[[shard]]\nid = 7\npid = 5\n"  # an id no shard can have
    )
    shards = ShardsFile(path)
    shards.load()
    assert list(shards.refused) == ["typo"]
    assert shards.refused["typo"].startswith(f"shards file {path}, shard #2: unknown key 'gpu'")


@dataclass(frozen=True)
class Bucket:
    """The placements bucket as the shard pass reads it (a PlacementFeed)."""

    problems: dict[str, str]
    specs: dict[str, PlacementSpec] = field(default_factory=dict)


def test_the_file_says_first_where_it_and_the_bucket_refuse_one_shard(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text('[[shard]]\nid = "a"\npid = 2\ngpu = [0]\n')
    shards = ShardsFile(path)
    shards.load()
    bucket = Bucket({"n1.a": "KV said of a", "n1.b": "KV said of b", "n1.x.y": "no shard's key"})
    reasons = refused_values("n1", shards, bucket)
    assert list(reasons) == ["a", "b"]
    assert reasons["a"].startswith("shards file") and reasons["b"] == "KV said of b"


def test_a_refusal_is_said_until_mended_or_removed_then_gone() -> None:
    values = RefusedValues("n1", "s1")
    said, gone = values.pass_({"a": "bad a", "b": "bad b"}, set(), NOW)
    assert [(s.shard, s.verdict, s.reason) for s in said] == [
        ("a", "unknown", "placement refused: bad a"),
        ("b", "unknown", "placement refused: bad b"),
    ]
    assert gone == [] and {s.session for s in said} == {"s1"}
    # `a` mended (now watched: its verdict replaces the refusal), `b` removed.
    said, gone = values.pass_({}, {"a"}, NOW)
    assert said == []
    assert [(s.shard, s.verdict, s.reason) for s in gone] == [
        ("b", "gone", "no longer watched: its refused placement was removed")
    ]
    assert values.pass_({}, {"a"}, NOW) == ([], [])  # gone once


def test_refusals_take_only_the_room_the_shards_a_node_takes_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(refused, "MAX_SHARDS", 3)
    said, _ = RefusedValues("n1", "s1").pass_({"x": "", "y": "", "z": ""}, {"a", "b"}, NOW)
    assert [s.shard for s in said] == ["x"]
