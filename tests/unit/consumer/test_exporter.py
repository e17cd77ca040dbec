"""The exporter's collector on constructed view content: values, labels, units, stale nodes."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from placewatch.consumer.exporter.collector import FleetCollector, stale_limit
from placewatch.consumer.exporter.metrics import GPU_LABELS, GPU_METRICS, served
from placewatch.consumer.exporter.options import Listen, listen_argument
from placewatch.consumer.fleet import Holdings
from placewatch.schemas import GpuSample

from tests.support.held import MIB, NOW, UUID0, held, holdings, node_sample

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(content: Holdings, now: datetime = NOW, **kwargs: object) -> Series:
    registry = CollectorRegistry(auto_describe=False)
    collector = FleetCollector(lambda: content, clock=now.timestamp, **kwargs)  # type: ignore[arg-type]
    registry.register(collector)
    text = generate_latest(registry).decode()
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return series


def gpu_labels(
    index: str, uuid: str, bus: str, node: str = "gpu-07"
) -> tuple[tuple[str, str], ...]:
    values = dict(
        zip(
            GPU_LABELS,
            [index, uuid, bus, f"nvidia{index}", "NVIDIA A100-SXM4-80GB", node],
            strict=True,
        )
    )
    return tuple(sorted(values.items()))


def test_gpu_metrics_take_dcgm_names_units_and_labels() -> None:
    series = scrape(holdings(node_sample("gpu-07", NOW - timedelta(seconds=1))))
    gpu0 = gpu_labels("0", UUID0, "00000000:07:00.0")
    assert series[("DCGM_FI_DEV_GPU_UTIL", gpu0)] == 37.0
    assert series[("DCGM_FI_DEV_FB_USED", gpu0)] == 40960.0  # MiB, rounded down
    assert series[("DCGM_FI_DEV_FB_FREE", gpu0)] == 40405.0
    assert series[("DCGM_FI_DEV_GPU_TEMP", gpu0)] == 45.0
    assert series[("DCGM_FI_DEV_POWER_USAGE", gpu0)] == 212.34
    assert series[("placewatch_gpu_foreign_bytes", gpu0)] == 10960 * MIB


def test_a_reading_the_tool_did_not_give_has_no_sample_not_zero() -> None:
    series = scrape(holdings(node_sample("gpu-07", NOW - timedelta(seconds=1))))
    gpu1 = gpu_labels("1", "GPU-9d2e", "00000000:0F:00.0")
    assert series[("DCGM_FI_DEV_FB_USED", gpu1)] == 0.0
    assert series[("DCGM_FI_DEV_FB_FREE", gpu1)] == 81365.0
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"):
        assert (name, gpu1) not in series
    assert ("placewatch_gpu_foreign_bytes", gpu1) not in series


def test_shard_verdicts_and_the_memory_each_shard_holds_per_gpu() -> None:
    series = scrape(holdings(node_sample("gpu-07", NOW - timedelta(seconds=1))))
    verdicts = {k: v for k, v in series.items() if k[0] == "placewatch_shard_verdict"}
    assert verdicts == {
        (
            "placewatch_shard_verdict",
            (("node", "gpu-07"), ("shard", "llama"), ("verdict", "gpu")),
        ): 1.0,
        (
            "placewatch_shard_verdict",
            (("node", "gpu-07"), ("shard", "qwen"), ("verdict", "cpu_fallback")),
        ): 1.0,
    }
    held_bytes = {k: v for k, v in series.items() if k[0] == "placewatch_shard_gpu_bytes"}
    # qwen's only process is of unknown size, and pid 104 is of no shard: neither is counted.
    assert held_bytes == {
        (
            "placewatch_shard_gpu_bytes",
            (("gpu", "0"), ("node", "gpu-07"), ("shard", "llama")),
        ): 30000 * MIB
    }


def test_node_up_and_age_then_a_stale_node_leaves_metrics() -> None:
    fresh = node_sample("fresh", NOW - timedelta(seconds=1.5))
    late = node_sample("late", NOW - timedelta(seconds=7))  # over 3 intervals of 2 s: down
    gone = node_sample("gone", NOW - timedelta(seconds=61))  # over max(5 x 2 s, 60 s)
    series = scrape(holdings(fresh, late, gone))
    assert series[("placewatch_node_up", (("node", "fresh"),))] == 1.0
    assert series[("placewatch_node_up", (("node", "late"),))] == 0.0
    assert series[("placewatch_node_sample_age_seconds", (("node", "fresh"),))] == 1.5
    assert series[("placewatch_node_sample_age_seconds", (("node", "late"),))] == 7.0
    assert not [k for k in series if ("node", "gone") in k[1] or ("Hostname", "gone") in k[1]]
    # --stale-after 5: the late node goes too
    series = scrape(holdings(fresh, late, gone), stale_after=5.0)
    assert {dict(k[1]).get("node") for k in series if k[0] == "placewatch_node_up"} == {"fresh"}


def test_the_default_stale_limit_is_five_intervals_or_60_s() -> None:
    assert stale_limit(2.0, None) == 60.0
    assert stale_limit(30.0, None) == 150.0
    assert stale_limit(30.0, 10.0) == 10.0
    slow = node_sample("slow", NOW - timedelta(seconds=100), interval_s=30.0)
    assert scrape(holdings(slow))[("placewatch_node_up", (("node", "slow"),))] == 0.0


def test_one_node_only_and_msgpack_payloads() -> None:
    a, b = node_sample("a", NOW), node_sample("b", NOW)
    content = holdings(a, b, encoding="msgpack")
    series = scrape(content, node="b")
    assert {dict(k[1]).get("node", dict(k[1]).get("Hostname")) for k in series} == {"b"}
    assert (
        series[("DCGM_FI_DEV_FB_FREE", gpu_labels("0", UUID0, "00000000:07:00.0", "b"))] == 40405.0
    )
    assert scrape(content, node="nowhere") == {}


def test_a_node_whose_inventory_is_not_held_yet_has_its_node_and_shard_metrics_only() -> None:
    telemetry, _ = held(node_sample("gpu-07", NOW))
    series = scrape(Holdings({"gpu-07": telemetry}, {}))
    assert series[("placewatch_node_up", (("node", "gpu-07"),))] == 1.0
    assert not [k for k in series if k[0].startswith("DCGM_")]
    assert len([k for k in series if k[0] == "placewatch_shard_verdict"]) == 2


def test_every_gpu_metric_reads_a_field_of_a_gpu_sample() -> None:
    fields = set(GpuSample.__struct_fields__)
    assert {m.field for m in GPU_METRICS} <= fields
    assert len(set(served())) == len(served())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9400", Listen("127.0.0.1", 9400)),
        ("[::1]:9401", Listen("::1", 9401)),
        ("0.0.0.0:1", Listen("0.0.0.0", 1)),
    ],
)
def test_listen_takes_host_and_port(text: str, expected: Listen) -> None:
    assert listen_argument(text) == expected


@pytest.mark.parametrize("text", ["9400", ":9400", "host:", "host:port", "host:0", "host:70000"])
def test_a_bad_listen_says_what_to_give(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not HOST:PORT"):
        listen_argument(text)
