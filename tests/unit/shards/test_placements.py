"""Placements from a shards file: bad entries reported and skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from placewatch.worker.shards.placements import MAX_SHARDS_FILE_BYTES, ShardsFile, parse_shards_file


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
        "health_url, log_path, min_gpu_bytes, engine, endpoint; that shard is skipped",
        f"shards file {path}, shard #3 (nothing-to-find): give `pid` or `match` to find its process; "
        "that shard is skipped",
        f"shards file {path}, shard #4: key 'gpus': Expected `array`, got `str`; give the physical "
        "indices of at most 64 GPUs (0 to 1023), each once; that shard is skipped",
        f"shards file {path}, shard #5 (bad-pattern): `match` is not a valid pattern: "
        "missing ) at position 6; that shard is skipped",
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
    # Gone for a moment, or broken halfway through an edit: the last good placements stand.
    path.unlink()
    assert shards.load() is True
    assert [s.id for s in shards.specs] == ["a", "b"]
    assert shards.problems == [
        f"shards file {path} cannot be read (No such file or directory); check the path given "
        "with --shards; its last good placements (2) stay in force"
    ]
    path.write_text('[[shard]]\nid = "a"\npid = 1\ngpus = [0\n')
    assert shards.load() is True
    assert [s.id for s in shards.specs] == ["a", "b"]
    assert "is not valid TOML" in shards.problems[0]
    assert shards.problems[0].endswith("its last good placements (2) stay in force")
    path.write_text('[[shard]]\nid = "c"\npid = 3\n')
    os.utime(path, ns=(2, 2 * 10**9))
    assert shards.load() is True
    assert ([s.id for s in shards.specs], shards.problems) == (["c"], [])


def test_a_file_never_read_whole_keeps_no_placements(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text("[[shard]\nid=")
    shards = ShardsFile(path)
    assert shards.load() is True
    assert shards.specs == []
    assert "is not valid TOML" in shards.problems[0] and "stay in force" not in shards.problems[0]


def test_a_path_to_what_is_no_shards_file_is_refused_and_the_last_placements_stand(
    tmp_path: Path,
) -> None:
    """A named pipe (opening it would wait for a writer), a device (/dev/zero would be read
    until memory ran out), bytes that are not UTF-8: each one problem, never a tick that hangs
    or fails."""
    path = tmp_path / "shards.toml"
    path.write_text('[[shard]]\nid = "a"\npid = 1\ngpus = [0]\n')
    shards = ShardsFile(path)
    assert shards.load() is True
    kept = "; its last good placements (1) stay in force"
    path.write_bytes(b'[[shard]]\nid = "caf\xe9"\npid = 1\n')  # Latin-1, not UTF-8
    os.utime(path, ns=(1, 10**9))
    assert shards.load() is True
    assert shards.problems == [
        f"shards file {path} is not UTF-8 text (byte 0xe9 at offset 19){kept}"
    ]
    path.unlink()
    os.mkfifo(path)
    assert shards.load() is True
    assert shards.problems == [f"shards file {path} is a named pipe; give the path of a file{kept}"]
    assert [s.id for s in shards.specs] == ["a"]
    specs, problems = parse_shards_file(Path("/dev/zero"))
    assert (specs, problems) == (
        [],
        ["shards file /dev/zero is a character device; give the path of a file"],
    )


def test_a_shards_file_larger_than_any_can_be_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"  # given by mistake
    with path.open("wb") as f:
        f.truncate(MAX_SHARDS_FILE_BYTES + 1)
    assert parse_shards_file(path) == (
        [],
        [f"shards file {path} is larger than {MAX_SHARDS_FILE_BYTES:,} bytes"],
    )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("pid = -1", "key 'pid': Expected `int` >= 1; give the process id of a running process"),
        (
            "pid = 9223372036854775807",
            "key 'pid': Expected `int` <= 4194304; give the process id of a running process",
        ),
        ("pid = 1\ngpus = [0, 0]", "(a): `gpus` names GPU 0 twice"),
        ("pid = 1\ngpus = [-1]", "key 'gpus': Expected `int` >= 0; give the physical indices"),
        ("pid = 1\nmin_gpu_bytes = 1152921504606846976", "key 'min_gpu_bytes': Expected `int` <="),
        ('pid = 1\nhealth_url = "file:///etc/passwd"', "key 'health_url': Expected `str` matching"),
        (
            'pid = 1\nhealth_url = "http://u:s3cret@h:80x/?token=s3cret"',
            "(a): `health_url` has a port that is not a number from 0 to 65535",
        ),
        ('pid = 1\nhealth_url = "http:///health"', "(a): `health_url` names no host; give an"),
    ],
)
def test_an_entry_that_cannot_be_used_is_refused_naming_what_is_wrong(
    tmp_path: Path, entry: str, problem: str
) -> None:
    path = tmp_path / "shards.toml"
    path.write_text(f'[[shard]]\nid = "a"\n{entry}\n\n[[shard]]\nid = "b"\npid = 2\n')
    specs, problems = parse_shards_file(path)
    assert [s.id for s in specs] == ["b"]
    (said,) = problems
    assert said.startswith(f"shards file {path}, shard #1"), said
    assert problem in said and said.endswith("that shard is skipped"), said
    assert "s3cret" not in said


def test_a_shard_id_longer_than_a_name_may_be_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "shards.toml"
    path.write_text(f'[[shard]]\nid = "{"é" * 65}"\npid = 1\n')  # 130 bytes, 65 characters
    specs, (problem,) = parse_shards_file(path)
    assert specs == []
    assert "`id` is 130 bytes; give the shard a name of 1 to 128 bytes" in problem
