"""Serving with its GPUs idle is not `gpu`: the verdict with compute evidence beyond memory.

The four cases: serving and no activity -> cpu_fallback; serving and activity -> gpu; not
serving -> unchanged; no activity reading -> unchanged. What memory or the engine already
says otherwise stands.
"""

from __future__ import annotations

from placewatch.schemas import GpuSample, PlacementSpec
from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.serving import Request, Serving
from placewatch.worker.shards.activity import ActivityWindows, Read
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.verdict import Judgement, Observation, judge

GiB = 1 << 30
GPUS = [GpuSample(index=i, uuid=f"GPU-{i}", vendor="nvidia") for i in range(2)]
SERVING = Serving("llama.cpp", (Request(10.0, 20.0, busy_s=9.7), Request(21.0)), seen=True)
QUIET = Serving("llama.cpp", (), seen=True)


def verdict_after(
    sm: list[float | None],
    serving: Serving | None,
    held: dict[int, int | None] | None = None,
    evidence: EngineEvidence | None = None,
) -> Judgement:
    """A shard placed on GPU 0 holding 1.4 GiB there, read every 2 s from 12 s on."""
    windows = ActivityWindows()
    activity = None
    for n, value in enumerate(sm):
        at = 12.0 + 2 * n
        read = Read(at, {0: value}, {0: None if value is None else 0.0})
        activity = windows.observe("s", pid=42, read=read, serving=serving, placed={0}, now=at)
    obs = Observation(
        placement=Placement(PlacementSpec(id="s", pid=42, gpus=[0]), "file"),
        pid=42,
        alive=True,
        ready=True,
        gpus_known=True,
        held={0: int(1.4 * GiB)} if held is None else held,
        evidence=evidence,
        activity=activity,
    )
    return judge(obs, GPUS)


def test_serving_with_no_activity_is_cpu_fallback_saying_what_was_seen() -> None:
    j = verdict_after([0.0, 0.0, 0.0, 0.0], SERVING)
    assert (j.verdict, j.backend) == ("cpu_fallback", "CPU")
    assert j.reason.startswith(
        "placed on GPU 0 but computing on the CPU: llama.cpp served 2 requests within 30 s "
        "(9.7 s by its own timing) while its processes showed 0% SM on GPU 0 at all 4 reads "
        "taken meanwhile; the 1.4 GiB it holds there is not computing"
    )
    assert "-ngl" in j.reason and "placewatch doctor" in j.reason
    assert [(d.index, d.used_bytes) for d in j.devices] == [(0, int(1.4 * GiB))]


def test_serving_with_activity_is_gpu() -> None:
    j = verdict_after([0.0, 41.0, 0.0, 0.0], SERVING)
    assert (j.verdict, j.reason) == ("gpu", "holds 1.4 GiB on GPU 0 as placed")


def test_not_serving_is_unchanged() -> None:
    assert verdict_after([0.0, 0.0, 0.0, 0.0], QUIET).verdict == "gpu"
    assert verdict_after([0.0, 0.0, 0.0, 0.0], None).verdict == "gpu"  # no log followed


def test_no_activity_reading_is_unchanged() -> None:
    assert verdict_after([None, None, None, None], SERVING).verdict == "gpu"


def test_what_memory_already_says_stands() -> None:
    j = verdict_after([0.0, 0.0, 0.0, 0.0], SERVING, held={1: 2 * GiB})
    assert j.verdict == "misplaced"
    nothing = verdict_after([0.0, 0.0, 0.0, 0.0], SERVING, held={})
    assert nothing.verdict == "cpu_fallback"
    assert "hold no memory there" in nothing.reason  # memory's own reason, not activity's


def test_what_the_engine_already_says_stands() -> None:
    partial = EngineEvidence(engine="llama.cpp", layers_offloaded=8, layers_total=29)
    j = verdict_after([0.0, 0.0, 0.0, 0.0], SERVING, evidence=partial)
    assert j.verdict == "partial" and "offloaded only 8 of 29" in j.reason


def test_the_engine_claiming_every_layer_does_not_outweigh_an_idle_gpu() -> None:
    # `offloaded 29/29 layers` beside a GPU that ran nothing while it served: the reads are
    # of what happened, the log line of what was planned.
    full = EngineEvidence(engine="llama.cpp", backend="CUDA", layers_offloaded=29, layers_total=29)
    assert verdict_after([0.0, 0.0, 0.0, 0.0], SERVING, evidence=full).verdict == "cpu_fallback"
    assert verdict_after([0.0, 3.0, 0.0, 0.0], SERVING, evidence=full).verdict == "gpu"
