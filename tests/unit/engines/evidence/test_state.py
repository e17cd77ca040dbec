"""The evidence is a value: what a reader hands out no later line changes, and equal
readings compare equal, as the log-following task compares them to see a change."""

from __future__ import annotations

import dataclasses

import pytest

from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.read import EvidenceReader, read_text
from placewatch.worker.engines.evidence.state import EvidenceState

LOADED = "load_tensors: offloaded 2/33 layers to GPU"
FAILED = "ggml_cuda_init: failed to initialize CUDA: unknown error"


def test_a_snapshot_is_not_changed_by_later_lines() -> None:
    reader = EvidenceReader()
    reader.read(LOADED)
    before = reader.snapshot()
    reader.read(FAILED)
    reader.read("load_tensors: offloaded 0/33 layers to GPU")
    assert (before.backend, before.gpu_failed, before.layers_offloaded) == (None, None, 2)
    assert before.lines == (LOADED,)
    after = reader.snapshot()
    assert (after.backend, after.gpu_failed, after.layers_offloaded) == ("CPU", FAILED, 0)
    assert after.lines == (LOADED, FAILED, "load_tensors: offloaded 0/33 layers to GPU")


def test_engine_evidence_cannot_be_assigned_to() -> None:
    ev = read_text(LOADED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.backend = "CPU"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ev.lines.append("more")  # type: ignore[attr-defined]
    assert ev.lines == (LOADED,)


def test_a_snapshot_is_kept_until_a_line_may_change_it() -> None:
    reader = EvidenceReader()
    reader.read(LOADED)
    first = reader.snapshot()
    reader.read("srv  update_slots: all slots are idle")  # no engine keyword in it
    assert reader.snapshot() is first
    reader.read(FAILED)
    assert reader.snapshot() is not first


def test_the_same_lines_read_twice_are_equal_values() -> None:
    one, two = EvidenceReader(), EvidenceReader()
    for reader in (one, two):
        reader.read(LOADED)
        reader.read(FAILED)
    assert one.snapshot() == two.snapshot()
    assert hash(one.snapshot()) == hash(two.snapshot())
    assert one.snapshot() != read_text(LOADED)


def test_a_reader_that_read_nothing_is_a_fresh_evidence() -> None:
    assert EvidenceReader().snapshot() == EngineEvidence()
    assert EvidenceState().freeze() == EngineEvidence()


def test_the_working_state_has_every_field_of_the_value() -> None:
    # the follower's (a rotated log, one read behind or not read), not a line's
    follower = ("stale_since", "deleted", "behind_bytes", "unread")
    names = [f.name for f in dataclasses.fields(EngineEvidence) if f.name not in follower]
    own = ["listing_devices"]  # where the reader is in a list; nothing said of the engine
    assert [f.name for f in dataclasses.fields(EvidenceState) if f.name not in own] == names


@pytest.mark.parametrize(
    ("evidence", "known"),
    [
        (EngineEvidence(), False),
        (EngineEvidence(engine="llama.cpp", verbosity=3, found_devices=("CUDA0",)), False),
        (EngineEvidence(gpu_backend="CUDA", gpu_weight_bytes=1 << 30), False),
        (EngineEvidence(backend="CPU"), True),
        (EngineEvidence(layers_offloaded=0), True),
        (EngineEvidence(gpu_failed="ggml_vulkan: No devices found"), True),
        (EngineEvidence(devices=("cuda:1",)), True),
    ],
)
def test_evidence_is_known_once_it_says_where_or_how_much_computes(
    evidence: EngineEvidence, known: bool
) -> None:
    assert evidence.known is known
