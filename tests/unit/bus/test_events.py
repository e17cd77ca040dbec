"""One status per change, one firing and one resolved per fallback, ids that dedupe."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from placewatch.schemas import ComputeStatus, DeviceUse, FallbackEvent
from placewatch.worker.bus.events import EventTracker


def status(
    verdict: str, devices: tuple[int, ...] = (), used: int = 1, **kw: object
) -> ComputeStatus:
    return ComputeStatus(
        node="n1", shard="llama-a", session="s1", time=datetime.now(UTC), placed_gpus=[1],
        verdict=verdict, devices=[DeviceUse(index=i, used_bytes=used) for i in devices], **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def kinds(out: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [
        (o.subject, o.message.state if isinstance(o.message, FallbackEvent) else o.message.verdict)
        for o in out
    ]


def test_first_status_then_only_changes_never_memory_jitter() -> None:
    t = EventTracker("n1", "s1")
    first = t.changes([status("starting")])
    assert kinds(first) == [("placewatch.compute.n1.llama-a", "starting")]
    assert first[0].msg_id == "n1.llama-a.s1.1"
    assert first[0].kv_key == "n1.llama-a"
    assert t.changes([status("starting")]) == []
    gpu = t.changes([status("gpu", (1,), used=100)])
    assert kinds(gpu) == [("placewatch.compute.n1.llama-a", "gpu")]
    assert t.changes([status("gpu", (1,), used=117)]) == []  # memory jitter
    assert kinds(t.changes([status("gpu", (1,), layers_offloaded=33, layers_total=33)])) == [
        ("placewatch.compute.n1.llama-a", "gpu")
    ]


def test_a_shard_restarted_under_the_same_verdict_is_published_again() -> None:
    t = EventTracker("n1", "s1")
    t.changes([status("gpu", (1,), pid=100, container_id="a" * 64)])
    assert t.changes([status("gpu", (1,), pid=100, container_id="a" * 64)]) == []
    moved = t.changes([status("gpu", (1,), pid=200, container_id="b" * 64)])
    assert [(o.message.pid, o.msg_id) for o in moved] == [(200, "n1.llama-a.s1.2")]  # type: ignore[union-attr]


def test_fallback_fires_once_and_resolves_on_leaving() -> None:
    t = EventTracker("n1", "s1")
    fired = t.changes([status("cpu_fallback")])
    # The event first: the status's copy in the bucket is what a restart believes was said.
    assert kinds(fired) == [
        ("placewatch.fallback.n1.llama-a", "firing"),
        ("placewatch.compute.n1.llama-a", "cpu_fallback"),
    ]
    assert fired[0].msg_id == "n1.llama-a.s1.1.firing"
    assert kinds(t.changes([status("partial", (1,))])) == [
        ("placewatch.compute.n1.llama-a", "partial")
    ]
    resolved = t.changes([status("gpu", (1,))])
    assert kinds(resolved) == [
        ("placewatch.fallback.n1.llama-a", "resolved"),
        ("placewatch.compute.n1.llama-a", "gpu"),
    ]
    event = resolved[0].message
    assert isinstance(event, FallbackEvent) and event.status.verdict == "gpu"


def test_a_verdict_turning_stale_and_fresh_again_is_a_status_each_and_never_an_event() -> None:
    t = EventTracker("n1", "s1")
    assert len(t.changes([status("cpu_fallback")])) == 2  # firing, and the status
    since = datetime.now(UTC)
    stale = t.changes([status("cpu_fallback", stale=True, stale_since=since)])
    assert kinds(stale) == [("placewatch.compute.n1.llama-a", "cpu_fallback")]
    assert t.changes([status("cpu_fallback", stale=True, stale_since=since)]) == []
    assert kinds(t.changes([status("cpu_fallback")])) == [
        ("placewatch.compute.n1.llama-a", "cpu_fallback")
    ]
    assert t.firing() == {"llama-a"}


def test_a_shard_that_goes_resolves_its_fallback() -> None:
    t = EventTracker("n1", "s1")
    t.changes([status("misplaced", (0,))])
    out = t.changes([], gone=[status("gone")])
    assert kinds(out) == [
        ("placewatch.fallback.n1.llama-a", "resolved"),
        ("placewatch.compute.n1.llama-a", "gone"),
    ]
    # Placed again later: reported afresh, with new ids.
    again = t.changes([status("starting")])
    assert again[0].msg_id == "n1.llama-a.s1.3"


def test_a_new_session_reports_every_shard_again_with_new_ids() -> None:
    first = EventTracker("n1", "s1").changes([status("gpu", (1,))])
    second = EventTracker("n1", "s2").changes([status("gpu", (1,))])
    assert len(first) == len(second) == 1
    assert first[0].msg_id != second[0].msg_id


def test_a_fallback_left_firing_by_an_earlier_session_is_resolved() -> None:
    earlier = [status("cpu_fallback"), msgspec.structs.replace(status("misplaced"), shard="old")]
    t = EventTracker("n1", "s2")
    t.seed(earlier)
    out = t.changes([status("gpu", (1,))])
    assert kinds(out) == [
        ("placewatch.fallback.n1.llama-a", "resolved"),
        ("placewatch.compute.n1.llama-a", "gpu"),
        ("placewatch.fallback.n1.old", "resolved"),
        ("placewatch.compute.n1.old", "gone"),
    ]
    gone = out[3].message
    assert isinstance(gone, ComputeStatus) and gone.session == "s2"
    assert gone.reason == "no longer placed or found since the worker restarted"
    assert t.changes([status("gpu", (1,))]) == []


def test_a_gpu_turning_unhealthy_under_a_shard_is_published_once_and_healthy_again_too() -> None:
    t = EventTracker("n1", "s1")
    t.changes([status("gpu", (1,))])
    sick = t.changes([status("gpu", (1,), unhealthy_gpus=[1], reason="GPU 1 is unhealthy")])
    assert [(o.message.unhealthy_gpus, o.msg_id) for o in sick] == [([1], "n1.llama-a.s1.2")]  # type: ignore[union-attr]
    assert t.changes([status("gpu", (1,), unhealthy_gpus=[1], reason="2 errors")]) == []
    assert [o.msg_id for o in t.changes([status("gpu", (1,))])] == ["n1.llama-a.s1.3"]


def test_forget_says_each_shard_gone_and_resolves_what_was_left_firing_under_its_own_session() -> (
    None
):
    left = [
        msgspec.structs.replace(status(verdict, (1,)), shard=shard)
        for shard, verdict in [
            ("a", "cpu_fallback"),
            ("b", "gpu"),
            ("c", "gone"),
            ("d", "misplaced"),
        ]
    ]
    out = EventTracker("n1", "f1").forget(left, "forgotten: the node is gone")
    assert kinds(out) == [
        ("placewatch.fallback.n1.a", "resolved"),
        ("placewatch.compute.n1.a", "gone"),
        ("placewatch.compute.n1.b", "gone"),
        ("placewatch.fallback.n1.d", "resolved"),
        ("placewatch.compute.n1.d", "gone"),
    ]
    assert [o.msg_id for o in out] == [
        "n1.a.f1.1.resolved", "n1.a.f1.1", "n1.b.f1.1", "n1.d.f1.1.resolved", "n1.d.f1.1",
    ]  # fmt: skip
    assert [o.kv_key for o in out] == [None, "n1.a", "n1.b", None, "n1.d"]
    for o in out:
        said = o.message.status if isinstance(o.message, FallbackEvent) else o.message
        assert (said.session, said.devices, said.reason) == (
            "f1",
            [],
            "forgotten: the node is gone",
        )
        assert said.placed_gpus == [1]  # what it was placed on, as the worker last said
