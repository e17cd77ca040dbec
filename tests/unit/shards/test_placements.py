"""Placements from a shards file and from bucket values: bad entries reported and skipped."""

from __future__ import annotations

import os
from pathlib import Path

from placewatch.shards.bucket import PlacementsBucket
from placewatch.shards.placements import ShardsFile, parse_shards_file


def test_shards_file_reads_every_documented_key(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text(
        '[[shard]]\nid = "llama-8b-a"\npid = 12345\ngpus = [0]\n\n'
        '[[shard]]\nid = "qwen"\nmatch = "llama-server.*--port 8081"\ngpus = [1, 2]\n'
        'health_url = "http://127.0.0.1:8081/health"\nlog_path = "/var/log/qwen.log"\n'
        'min_gpu_bytes = 1073741824\nengine = "llama.cpp"\n'
    )
    specs, problems = parse_shards_file(path)
    assert problems == []
    a, b = specs
    assert (a.id, a.pid, a.gpus, a.match) == ("llama-8b-a", 12345, [0], None)
    assert (b.id, b.match, b.gpus, b.min_gpu_bytes, b.engine) == (
        "qwen", "llama-server.*--port 8081", [1, 2], 1 << 30, "llama.cpp",
    )  # fmt: skip
    assert b.health_url == "http://127.0.0.1:8081/health" and b.log_path == "/var/log/qwen.log"


def test_one_bad_entry_is_reported_and_the_others_kept(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text(
        '[[shard]]\nid = "ok"\npid = 1\ngpus = [0]\n\n'
        '[[shard]]\nid = "typo"\npid = 2\ngpu = [0]\n\n'
        '[[shard]]\nid = "nothing-to-find"\ngpus = [0]\n\n'
        '[[shard]]\nid = "bad-gpus"\npid = 3\ngpus = "zero"\n\n'
        '[[shard]]\nid = "bad-pattern"\nmatch = "llama("\n\n'
        '[[shard]]\nid = "ok"\npid = 4\n'
    )
    specs, problems = parse_shards_file(path)
    assert [s.id for s in specs] == ["ok"]
    assert problems == [
        f"shards file {path}, shard #2: unknown key 'gpu'; known keys: id, gpus, pid, match, "
        "health_url, log_path, min_gpu_bytes, engine; that shard is skipped",
        f"shards file {path}, shard #3 (nothing-to-find): give `pid` or `match` to find its process; "
        "that shard is skipped",
        f"shards file {path}, shard #4: key 'gpus': Expected `array`, got `str`; that shard is skipped",
        f"shards file {path}, shard #5 (bad-pattern): `match` is not a valid pattern: "
        "missing ), unterminated subpattern at position 5; that shard is skipped",
        f"shards file {path}, shard #6: id 'ok' is used twice; skipped",
    ]


def test_broken_toml_is_one_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text("[[shard]\nid=")
    specs, problems = parse_shards_file(path)
    assert specs == []
    assert len(problems) == 1 and "is not valid TOML" in problems[0]


def test_the_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text('[[shard]]\nid = "a"\npid = 1\ngpus = [0]\n')
    shards = ShardsFile(path)
    assert shards.load() is True
    assert shards.load() is False  # unchanged: not read again
    path.write_text('[[shard]]\nid = "a"\npid = 1\ngpus = [0]\n\n[[shard]]\nid = "b"\npid = 2\n')
    os.utime(path, ns=(1, 10**9))
    assert shards.load() is True
    assert [s.id for s in shards.specs] == ["a", "b"]
    path.unlink()
    assert shards.load() is True
    assert shards.specs == [] and "cannot be read" in shards.problems[0]


def test_bucket_values_put_update_delete_and_bad_json() -> None:
    bucket = PlacementsBucket("n1")
    bucket.apply("n1.a", b'{"id": "a", "pid": 7, "gpus": [1]}', deleted=False)
    assert bucket.specs["n1.a"].gpus == [1]
    bucket.apply("n1.a", b'{"id": "a", "pid": 7, "gpus": [2]}', deleted=False)
    assert bucket.specs["n1.a"].gpus == [2]
    bucket.apply("n1.b", b"{not json", deleted=False)
    assert "n1.b" not in bucket.specs
    assert bucket.problems["n1.b"].startswith("KV placewatch_placements key n1.b: not JSON")
    bucket.apply("n1.c", b'{"id": "c", "gpus": [0]}', deleted=False)
    assert "give `pid` or `match`" in bucket.problems["n1.c"]
    bucket.apply("n1.a", None, deleted=True)
    assert "n1.a" not in bucket.specs
    bucket.apply("n1.b", b'{"id": "b", "pid": 8}', deleted=False)
    assert "n1.b" not in bucket.problems and bucket.specs["n1.b"].pid == 8
