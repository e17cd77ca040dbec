"""Placements from the placements bucket's values: bad values reported and skipped."""

from __future__ import annotations

from placewatch.worker.bus.bucket import PlacementsBucket


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


def test_a_bucket_key_must_be_the_node_and_the_shard_id_as_tokens() -> None:
    bucket = PlacementsBucket("gpu_1")
    bucket.apply("gpu_1.llama-3=2E1-8b", b'{"id": "llama-3.1-8b", "pid": 7}', deleted=False)
    assert bucket.specs["gpu_1.llama-3=2E1-8b"].id == "llama-3.1-8b"
    # A key written with the id's own dot is two tokens: seen, and refused with the key to use.
    bucket.apply("gpu_1.llama-3.1-8b", b'{"id": "llama-3.1-8b", "pid": 7}', deleted=False)
    assert "gpu_1.llama-3.1-8b" not in bucket.specs
    assert bucket.problems["gpu_1.llama-3.1-8b"] == (
        "KV placewatch_placements key gpu_1.llama-3.1-8b places 'llama-3.1-8b', whose key is "
        "gpu_1.llama-3=2E1-8b: a key is the node and the shard id as subject tokens "
        "(docs/subjects.md); the placement is skipped"
    )
