"""Blindness as alerts of their own: a shard stale, or a node without a GPU tool answering,
past the limit fires; evidence back ends it; the times are the server's, not the node's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from placewatch.consumer.alerts.alertmanager import AlertTemplate
from placewatch.consumer.alerts.blindness import Blind, Blindness, shard_since
from placewatch.schemas import ComputeStatus, GpuReading, NodeTelemetry, SourceStatus

from tests.support.fallback_events import status

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
LIMIT = 300.0
SMI_FAILED = SourceStatus(
    name="nvidia-smi", ok=False, latency_ms=40.0, error="NVIDIA-SMI has failed", vendor="nvidia"
)
SMI_OK = SourceStatus(name="nvidia-smi", ok=True, latency_ms=30.0, vendor="nvidia")


def stale(shard: str, since: datetime, published: datetime) -> ComputeStatus:
    return msgspec.structs.replace(
        status(
            "cpu_fallback", published, "placed on GPU 1 but computing on the CPU (stale)", shard
        ),
        stale=True,
        stale_since=since,
    )


def telemetry(*sources: SourceStatus, read: bool = False) -> NodeTelemetry:
    return NodeTelemetry(
        node="gpu-07",
        session="d9eab6f1c983",
        seq=1,
        time=T0,
        interval_s=2.0,
        inventory="b4d367f7ed28",
        gpus=[GpuReading(index=0)] if read else [],
        sources=list(sources),
    )


def at(when: datetime, seconds: float = 0.0) -> float:
    return when.timestamp() + seconds


def test_a_shard_stale_past_the_limit_fires_once_and_ends_when_fresh() -> None:
    blind = Blindness(LIMIT)
    key = ("gpu-07", "llama-8b-a")
    s = stale("llama-8b-a", T0, T0 + timedelta(seconds=2))
    stored = {key: at(T0, 2.5)}
    assert blind.plan({key: s}, stored, at(T0, 299)) == []
    (fired,) = blind.plan({key: s}, stored, at(T0, 301))
    assert fired == Blind("gpu-07", "llama-8b-a", at(T0, 0.5), s.reason)
    blind.commit([fired])
    assert blind.plan({key: s}, stored, at(T0, 400)) == []  # fires; the resend posts it again
    assert blind.firing_alerts() == [fired]
    fresh = status("cpu_fallback", T0 + timedelta(seconds=410), "on the CPU", "llama-8b-a")
    (ended,) = blind.plan({key: fresh}, stored, at(T0, 411))
    assert ended == Blind("gpu-07", "llama-8b-a", at(T0, 0.5), s.reason, ends=at(T0, 411))
    blind.commit([ended])
    assert blind.firing_alerts() == []


def test_a_shard_s_blindness_counts_on_the_server_s_clock_not_the_node_s() -> None:
    # The node's clock is an hour ahead: its times say so, the server's stamp does not.
    ahead = T0 + timedelta(hours=1)
    s = stale("a", ahead - timedelta(seconds=90), ahead)
    assert shard_since(s, at(T0)) == at(T0, -90)
    assert shard_since(s, None) == at(ahead, -90)  # no stamp: the node's word
    assert shard_since(status("gpu", T0, "", "a"), at(T0)) is None


def test_a_node_whose_gpu_tools_all_fail_past_the_limit_fires_and_ends_when_one_answers() -> None:
    blind = Blindness(LIMIT)
    blind.saw(telemetry(SMI_OK, read=True), at(T0))
    blind.saw(telemetry(SMI_FAILED), at(T0, 10))
    blind.saw(telemetry(SMI_FAILED), at(T0, 12))  # still blind: since the first that said so
    assert blind.plan({}, {}, at(T0, 309)) == []
    (fired,) = blind.plan({}, {}, at(T0, 311))
    assert fired == Blind("gpu-07", None, at(T0, 10), "nvidia-smi: NVIDIA-SMI has failed")
    blind.commit([fired])
    blind.saw(telemetry(SMI_OK, read=True), at(T0, 400))
    (ended,) = blind.plan({}, {}, at(T0, 401))
    assert (ended.key, ended.ends) == (("gpu-07", None), at(T0, 401))


def test_a_node_forgotten_ends_its_blindness() -> None:
    blind = Blindness(LIMIT)
    blind.saw(telemetry(SMI_FAILED), at(T0))
    (fired,) = blind.plan({}, {}, at(T0, 301))
    blind.commit([fired])
    blind.forget("gpu-07")
    (ended,) = blind.plan({}, {}, at(T0, 302))
    assert ended.ends == at(T0, 302)


def test_a_node_blind_at_first_sight_is_blind_since_its_stale_shards_lost_evidence() -> None:
    """A restarted `alerts` reads a node already blind for an hour: its shards' stale
    statuses say since when, and the alert fires at once rather than after the limit."""
    blind = Blindness(LIMIT)
    blind.saw(telemetry(SMI_FAILED), at(T0, 3600))
    key = ("gpu-07", "a")
    s = stale("a", T0, T0 + timedelta(seconds=2))
    fired = {b.key: b.since for b in blind.plan({key: s}, {key: at(T0, 2)}, at(T0, 3601))}
    assert fired == {("gpu-07", None): at(T0), key: at(T0)}


def test_a_node_without_gpu_tools_or_gpus_is_never_blind() -> None:
    absent = SourceStatus(name="nvml", ok=False, error="not found", vendor="nvidia")
    blind = Blindness(LIMIT)
    blind.saw(telemetry(absent), at(T0))
    assert blind.plan({}, {}, at(T0, 3600)) == []
    # One that read GPUs before and whose tools are then gone is blind.
    blind.saw(telemetry(SMI_OK, read=True), at(T0, 3601))
    blind.saw(telemetry(absent), at(T0, 3602))
    assert [b.key for b in blind.plan({}, {}, at(T0, 3602 + LIMIT))] == [("gpu-07", None)]


def test_blindness_alerts_carry_their_own_name_warning_and_the_static_labels() -> None:
    template = AlertTemplate({"team": "inference"}, {"runbook_url": "https://rb/pw"})
    now = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
    node = template.blind_body(Blind("gpu-07", None, at(T0), "nvidia-smi: failed"), now)
    assert node["labels"] == {
        "severity": "warning",
        "team": "inference",
        "alertname": "PlacewatchNodeBlind",
        "node": "gpu-07",
    }
    assert node["startsAt"] == "2026-11-30T06:00:00Z"
    assert node["annotations"]["summary"] == (
        "no GPU tool of gpu-07 has answered since 2026-11-30T06:00:00Z"
    )
    assert "(nvidia-smi: failed)" in node["annotations"]["description"]
    assert node["annotations"]["runbook_url"] == "https://rb/pw"
    assert "endsAt" not in node
    shard = template.blind_body(
        Blind("gpu-07", "a", at(T0), "on the CPU (stale since ...)", ends=at(T0, 400)), now
    )
    assert shard["labels"]["alertname"] == "PlacewatchShardBlind"
    assert (shard["labels"]["node"], shard["labels"]["shard"]) == ("gpu-07", "a")
    assert shard["endsAt"] == "2026-11-30T06:06:40Z"
    # A time later than this process's now is posted as now (alertmanager.py says why).
    later = template.blind_body(Blind("gpu-07", "a", at(now, 60), "x"), now)
    assert later["startsAt"] == "2026-11-30T07:00:00Z"
