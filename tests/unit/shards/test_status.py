"""A status leaves the node printable: a shard's and a pod's names, its reason and its
evidence lines, whatever control characters and bidirectional marks they were given."""

from __future__ import annotations

from datetime import UTC, datetime

from placewatch.schemas import PlacementSpec, SourceStatus
from placewatch.worker.shards.cgroup import Container
from placewatch.worker.shards.liveness import Tracked
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.status import gone_status, judged_status, printable_problem
from placewatch.worker.shards.verdict import Judgement, Observation

NOW = datetime(2026, 12, 7, tzinfo=UTC)
HOSTILE = "llama\x1b]0;owned\x07-\u202e8080"
ADDR = "10.0.0.7"
SHOWN = "llama\\x1b]0;owned\\x07-\\u202e8080"


def test_names_reason_and_evidence_are_published_escaped() -> None:
    placement = Placement(PlacementSpec(id=HOSTILE, pid=7, gpus=[0]), "discovered")
    t = Tracked(placement, pid=7, container=Container(namespace="ns\x9b", pod=HOSTILE, name="c"))
    judged = Judgement(
        "cpu_fallback",
        f"llama.cpp says 'failed to initialize CUDA: {HOSTILE}'",
        evidence=(f"ggml_cuda_init: {HOSTILE}", "plain"),
    )
    status = judged_status(
        HOSTILE,
        t,
        judged,
        node="n1",
        session="s",
        now=NOW,
        activity=None,
        gpu_health={},
        address="10.0.0.7",
    )
    assert status.shard == SHOWN and status.pod_name == SHOWN
    assert status.pod_namespace == "ns\\x9b" and status.container_name == "c"
    assert status.reason == f"llama.cpp says 'failed to initialize CUDA: {SHOWN}'"
    assert status.evidence == [f"ggml_cuda_init: {SHOWN}", "plain"]
    gone = gone_status(t, node="n1", session="s", now=NOW, tracked={}, address="n")
    assert gone.shard == SHOWN


def test_a_discovered_shard_whose_process_exited_keeps_what_its_engine_said() -> None:
    """Discovery's walk may drop an exited engine before a tick judges it gone: its last
    status reads as the tick's would, the evidence its engine gave while it ran kept."""
    placement = Placement(PlacementSpec(id="llama-server-8080", pid=7, gpus=[0]), "discovered")
    t = Tracked(placement, pid=7)
    judged = Judgement("cpu_fallback", "on the CPU", evidence=(f"no usable GPU {HOSTILE}",))
    t.judged = (Observation(placement, 7, alive=True, ready=True, gpus_known=False), [], judged)
    gone = gone_status(t, node="n1", session="s", now=NOW, tracked={}, address=ADDR)
    assert (gone.verdict, gone.pid, gone.backend) == ("gone", 7, "unknown")
    assert gone.reason == "pid 7 is not running; nothing computes for this shard"
    assert gone.evidence == [f"no usable GPU {SHOWN}"]
    claimed = Tracked(Placement(PlacementSpec(id="mine", pid=7, gpus=[0]), "file"), pid=7)
    handed = gone_status(
        t, node="n1", session="s", now=NOW, tracked={"mine": claimed}, address=ADDR
    )
    assert handed.reason.startswith("no longer watched: its process 7 runs on, watched as")
    assert handed.evidence == []
    placed = gone_status(claimed, node="n1", session="s", now=NOW, tracked={}, address=ADDR)
    assert placed.reason == "no longer watched: its placement was removed"


def test_a_placements_problem_is_published_escaped() -> None:
    problem = SourceStatus(name="placements", ok=False, error=f"shard {HOSTILE} is refused")
    assert printable_problem(problem).error == f"shard {SHOWN} is refused"
    fine = SourceStatus(name="nvml", ok=True)
    assert printable_problem(fine) is fine


def test_a_status_gives_its_endpoint_as_others_reach_it() -> None:
    spec = PlacementSpec(id="a", pid=7, gpus=[0], health_url="http://0.0.0.0:8080/llm/health")
    placement = Placement(spec, "file")
    t = Tracked(placement, pid=7)
    judged = Judgement("gpu", "holds 1 GiB on GPU 0 as placed")
    status = judged_status(
        "a", t, judged, node="n1", session="s", now=NOW, activity=None, gpu_health={}, address=ADDR
    )
    assert status.endpoint is not None and status.endpoint.url() == "http://10.0.0.7:8080/llm"
    gone = gone_status(t, node="n1", session="s", now=NOW, tracked={}, address=ADDR)
    assert (gone.verdict, gone.endpoint) == ("gone", status.endpoint)
