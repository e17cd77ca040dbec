"""A verdict says where its engine's log is not read, or read behind what it holds."""

from __future__ import annotations

from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.shards.lost_evidence import log_note
from placewatch.worker.shards.verdict import Judgement

JUDGED = Judgement("gpu", "holds 4.9 GiB on GPU 0 as placed")


def test_a_log_read_to_its_end_adds_nothing() -> None:
    assert log_note(JUDGED, EngineEvidence(layers_offloaded=33)) is JUDGED
    assert log_note(JUDGED, None) is JUDGED


def test_a_refused_log_says_why() -> None:
    said = log_note(JUDGED, EngineEvidence(unread="/tmp/x.log is a named pipe, not a file"))
    assert said.reason == (
        "holds 4.9 GiB on GPU 0 as placed; its log is not read: /tmp/x.log is a named pipe, "
        "not a file"
    )
    assert said.verdict == "gpu"


def test_a_log_read_behind_says_how_far() -> None:
    said = log_note(JUDGED, EngineEvidence(behind_bytes=300 << 20))
    assert said.reason == (
        "holds 4.9 GiB on GPU 0 as placed; its evidence is behind: its log holds 300.0 MiB not "
        "read yet (it grows faster than it is read: it is read on at each tick)"
    )
