"""The exporter's collector on constructed view content: values, labels, units, stale nodes."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from datetime import datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from placewatch.consumer.exporter.collector import FleetCollector, stale_limit
from placewatch.consumer.fleet import Holdings
from placewatch.prometheus.exposition import Family, render
from placewatch.prometheus.listen import Listen, listen_argument
from placewatch.prometheus.metrics import (
    GPU_LABELS,
    GPU_METRICS,
    clock_event_mask,
    problem_kind,
    served,
)
from placewatch.schemas import GpuHealth, GpuSample
from placewatch.schemas.health import CLOCK_EVENT_BITS

from tests.support.held import MIB, NOW, UUID0, held, holdings, node_sample, sick_node

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


OWN = {"placewatch_unreadable_messages_total", "placewatch_exporter_serves"}
"""The series of the exporter's own view, served whatever the fleet."""


def scrape(content: Holdings, now: datetime = NOW, own: bool = False, **kwargs: object) -> Series:
    """The series served of `content` (and, with `own`, those of the exporter's view)."""
    collector = FleetCollector(lambda: content, clock=now.timestamp, **kwargs)  # type: ignore[arg-type]
    series = parse_series(collector.collect())
    return series if own else {k: v for k, v in series.items() if k[0] not in OWN}


def parse_series(families: Iterable[Family]) -> Series:
    """Every series of the families, as Prometheus's text format serves them."""
    text = render(families, openmetrics=False).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_messages_its_view_did_not_read_are_counted_by_reason() -> None:
    content = holdings(node_sample("a", NOW))
    none = {
        ("placewatch_unreadable_messages_total", (("reason", reason),)): 0.0
        for reason in ("schema", "malformed", "impostor", "partition")
    }
    assert scrape(content, own=True).items() >= none.items()
    counted = scrape(content, own=True, unreadable=lambda: {"impostor": 3, "schema": 2})
    assert counted[("placewatch_unreadable_messages_total", (("reason", "impostor"),))] == 3.0
    assert counted[("placewatch_unreadable_messages_total", (("reason", "schema"),))] == 2.0
    assert counted[("placewatch_unreadable_messages_total", (("reason", "malformed"),))] == 0.0
    serves = {("placewatch_exporter_serves", (("nodes", "*"), ("partition", ""))): 1.0}
    assert scrape(holdings(), own=True) == none | serves


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


def test_a_node_whose_clock_is_off_is_served_by_arrival_and_its_offset_is_a_metric() -> None:
    slow = node_sample("slow", NOW - timedelta(seconds=121))  # arrived 1 s ago, clock 120 s slow
    fast = node_sample("fast", NOW + timedelta(seconds=30))  # arrived now, clock 30 s fast
    (slow_t, slow_i), (fast_t, fast_i) = held(slow, late_s=120), held(fast, late_s=-30)
    content = Holdings({"slow": slow_t, "fast": fast_t}, {"slow": slow_i, "fast": fast_i})
    series = scrape(content)
    assert series[("placewatch_node_up", (("node", "slow"),))] == 1.0
    assert series[("placewatch_node_sample_age_seconds", (("node", "slow"),))] == 1.0
    assert series[("placewatch_node_clock_offset_seconds", (("node", "slow"),))] == -120.0
    assert ("DCGM_FI_DEV_FB_USED", gpu_labels("0", UUID0, "00000000:07:00.0", "slow")) in series
    assert series[("placewatch_node_sample_age_seconds", (("node", "fast"),))] == 0.0
    assert series[("placewatch_node_clock_offset_seconds", (("node", "fast"),))] == 30.0
    # 61 s on with nothing new, the fast node leaves /metrics as a node on time would.
    later = scrape(content, NOW + timedelta(seconds=61))
    assert [k[1] for k in later if k[0] == "placewatch_node_up"] == []


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
    fields |= {f"health.{f}" for f in GpuHealth.__struct_fields__}
    assert {m.field for m in GPU_METRICS} <= fields
    assert len(set(served())) == len(served())


def test_clocks_energy_and_health_take_dcgm_names_and_units() -> None:
    series = scrape(holdings(sick_node("gpu-07", NOW)))
    gpu0 = gpu_labels("0", UUID0, "00000000:07:00.0")
    expected = {
        "DCGM_FI_DEV_SM_CLOCK": 1410.0,
        "DCGM_FI_DEV_MEM_CLOCK": 1593.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 12.5,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456790.0,  # mJ, from J
        "DCGM_FI_DEV_XID_ERRORS": 79.0,  # the last XID's number, as DCGM gives it
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 31.0,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 17.0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2.0,
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 120.0,
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 2.0,
        "DCGM_FI_DEV_RETIRED_PENDING": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 4.0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 0.0,
        "DCGM_FI_DEV_PCIE_LINK_GEN": 4.0,
        "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16.0,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(0x4 | 0x40),
        "placewatch_gpu_healthy": 0.0,
        "placewatch_gpu_xid_errors_total": 3.0,
    }
    assert {name: series.get((name, gpu0)) for name in expected} == expected
    # Retired pages are not read on an A100 (it remaps rows), and it has no fan: no sample.
    for name in ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_FAN_SPEED"):
        assert (name, gpu0) not in series


def test_problems_are_labelled_by_kind_without_counts_and_healthy_gpus_have_none() -> None:
    series = scrape(holdings(sick_node("gpu-07", NOW)))
    problems = {
        dict(labels)["problem"]: (dict(labels)["gpu"], v)
        for (name, labels), v in series.items()
        if name == "placewatch_gpu_problem"
    }
    assert problems == {
        "XID 79 (GPU has fallen off the bus)": ("0", 1.0),
        "uncorrected ECC error(s) since the last reset": ("0", 1.0),
    }
    gpu1 = gpu_labels("1", "GPU-9d2e", "00000000:0F:00.0")
    assert series[("placewatch_gpu_healthy", gpu1)] == 1.0
    assert series[("placewatch_gpu_xid_errors_total", gpu1)] == 0.0
    assert series[("DCGM_FI_DEV_FAN_SPEED", gpu1)] == 30.0
    # A health read without those readings: no sample, never 0.
    for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_SM_CLOCK"):
        assert (name, gpu1) not in series


def test_a_gpu_without_health_read_has_no_health_sample() -> None:
    series = scrape(holdings(node_sample("gpu-07", NOW)))
    names = {name for name, _ in series}
    assert not names & {
        "placewatch_gpu_healthy",
        "placewatch_gpu_problem",
        "placewatch_gpu_xid_errors_total",
        "placewatch_shard_unhealthy_gpu",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    }


def test_shards_on_an_unhealthy_gpu_are_named() -> None:
    series = scrape(holdings(sick_node("gpu-07", NOW)))
    assert {
        labels: v
        for (name, labels), v in series.items()
        if name == "placewatch_shard_unhealthy_gpu"
    } == {
        (("gpu", "0"), ("node", "gpu-07"), ("shard", "llama")): 1.0,
        (("gpu", "0"), ("node", "gpu-07"), ("shard", "qwen")): 1.0,
    }


@pytest.mark.parametrize(
    ("problem", "kind"),
    [
        ("XID 48 (double-bit ECC error): reset the GPU or reboot the node", "XID 48 (double-bit ECC error)"),
        ("12 uncorrected ECC error(s) since the last reset: reset", "uncorrected ECC error(s) since the last reset"),
        ("a row remapping is pending: reset the GPU to apply it", "a row remapping is pending"),
        ("a row remapping failed (no spare memory row left): drain the GPU", "a row remapping failed (no spare memory row left)"),
        ("x" * 200, "x" * 80),
    ],
)  # fmt: skip
def test_a_problem_s_kind_is_its_first_clause_without_a_count(problem: str, kind: str) -> None:
    assert problem_kind(problem) == kind


def test_clock_events_read_as_dcgm_s_bitmask_and_none_when_none_are_named() -> None:
    assert clock_event_mask(["gpu_idle"]) == 1.0
    assert clock_event_mask(list(CLOCK_EVENT_BITS.values())) == float(0x1FF)
    assert clock_event_mask(["hw_slowdown", "hw_slowdown", "an amd-smi name"]) == 8.0
    assert clock_event_mask([]) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9400", Listen("127.0.0.1", 9400)),
        ("[::1]:9401", Listen("::1", 9401)),
        ("0.0.0.0:1", Listen("0.0.0.0", 1)),
        (":9400", Listen("0.0.0.0", 9400)),  # dcgm-exporter's way of saying every interface
    ],
)
def test_listen_takes_host_and_port(text: str, expected: Listen) -> None:
    assert listen_argument(text) == expected


@pytest.mark.parametrize("text", ["9400", ":", "host:", "host:port", "host:0", ":70000"])
def test_a_bad_listen_says_what_to_give(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not HOST:PORT"):
        listen_argument(text)
