"""FleetView's placement question on constructed holdings: which GPUs can take N bytes now,
ranked, each with its age; and which nodes went stale."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from placewatch.consumer.capacity import SharedGpu, gpus_for, shared_gpus, stale
from placewatch.consumer.fleet import Holdings
from placewatch.schemas import GpuHealth, GpuSample

from tests.support.held import MIB, NOW, UUID0, held, holdings, node_sample


def test_gpus_that_can_take_the_bytes_the_most_free_first_with_their_age() -> None:
    a = node_sample("a", NOW - timedelta(seconds=1))  # GPU 0: 40405 MiB free, GPU 1: 81365
    b = node_sample("b", NOW - timedelta(seconds=3), machine="-b")
    found = gpus_for(holdings(a, b), 40000 * MIB, NOW)
    assert [(c.node, c.gpu, c.free_bytes // MIB, c.age_s) for c in found] == [
        ("a", 1, 81365, 1.0),
        ("b", 1, 81365, 3.0),
        ("a", 0, 40405, 1.0),
        ("b", 0, 40405, 3.0),
    ]
    assert found[2].foreign_bytes == 10960 * MIB
    assert found[2].uuid == "GPU-3f6c1a52-8e1b-4c2d-9a47-0b5d7e9f1a20"
    assert [(c.node, c.gpu) for c in gpus_for(holdings(a, b), 50000 * MIB, NOW)] == [
        ("a", 1),
        ("b", 1),
    ]
    assert gpus_for(holdings(a, b), 90000 * MIB, NOW) == []


def test_a_stale_node_offers_no_gpu_and_is_named() -> None:
    live = node_sample("live", NOW - timedelta(seconds=5))  # under 3 intervals of 2 s
    late = node_sample("late", NOW - timedelta(seconds=7), machine="-late")
    later = node_sample("later", NOW - timedelta(seconds=70), machine="-later")
    content = holdings(live, late, later)
    assert {c.node for c in gpus_for(content, 0, NOW)} == {"live"}
    assert [(s.node, s.age_s, s.limit_s) for s in stale(content, NOW)] == [
        ("later", 70.0, 6.0),
        ("late", 7.0, 6.0),
    ]
    assert {c.node for c in gpus_for(content, 0, NOW, max_age=10)} == {"live", "late"}
    assert [s.node for s in stale(content, NOW, max_age=10)] == ["later"]


def test_free_is_total_minus_used_where_the_tool_gives_no_free_and_unknown_is_left_out() -> None:
    s = node_sample("n", NOW)
    gpus = [
        GpuSample(index=0, memory_total_bytes=100 * MIB, memory_used_bytes=30 * MIB),
        GpuSample(index=1, memory_used_bytes=30 * MIB),
    ]
    telemetry, inventory = held(msgspec.structs.replace(s, gpus=gpus))
    found = gpus_for(Holdings({"n": telemetry}, {"n": inventory}), 1, NOW)
    assert [(c.gpu, c.free_bytes) for c in found] == [(0, 70 * MIB)]


def test_a_node_without_its_inventory_is_not_offered_but_can_be_stale() -> None:
    telemetry, _ = held(node_sample("n", NOW - timedelta(seconds=30)))
    content = Holdings({"n": telemetry}, {})
    assert gpus_for(content, 0, NOW, max_age=60) == []
    assert [s.node for s in stale(content, NOW)] == ["n"]


def test_an_unhealthy_gpu_is_not_offered_however_much_it_has_free() -> None:
    s = node_sample("n", NOW)
    fallen = GpuHealth(
        healthy=False,
        problems=["XID 79 (GPU has fallen off the bus): reset the GPU or reboot the node"],
        fatal_xid=79,
    )
    gpus = [
        msgspec.structs.replace(s.gpus[0], health=GpuHealth(ecc_corrected_volatile=3)),
        msgspec.structs.replace(s.gpus[1], health=fallen),  # the most free: 81365 MiB
    ]
    telemetry, inventory = held(msgspec.structs.replace(s, gpus=gpus))
    content = Holdings({"n": telemetry}, {"n": inventory})
    assert [(c.gpu, c.free_bytes // MIB) for c in gpus_for(content, 0, NOW)] == [(0, 40405)]
    assert gpus_for(content, 50000 * MIB, NOW) == []


def test_ages_are_the_views_not_the_nodes_clock() -> None:
    # Both arrived a second ago; "behind" stamps its samples a minute in the past (its clock
    # is a minute slow), "ahead" an hour in the future.
    behind = node_sample("behind", NOW - timedelta(seconds=61))
    ahead = node_sample("ahead", NOW + timedelta(hours=1) - timedelta(seconds=1), machine="-a")
    content = Holdings(
        {
            "behind": held(behind, late_s=60)[0],
            "ahead": held(ahead, late_s=-3600)[0],
        },
        {
            "behind": held(behind, late_s=60)[1],
            "ahead": held(ahead, late_s=-3600)[1],
        },
    )
    found = gpus_for(content, 0, NOW)
    assert {(c.node, c.age_s) for c in found} == {("behind", 1.0), ("ahead", 1.0)}
    assert stale(content, NOW) == []
    # Seven seconds later with nothing new, both are stale, the one ahead as well.
    later = NOW + timedelta(seconds=6)
    assert [(s.node, s.age_s) for s in stale(content, later)] == [
        ("ahead", 7.0),
        ("behind", 7.0),
    ]
    assert gpus_for(content, 0, later) == []
    assert round(content.nodes["behind"].clock_offset_s) == -60
    assert round(content.nodes["ahead"].clock_offset_s) == 3600


def test_a_gpu_two_live_nodes_report_is_offered_once_and_named() -> None:
    # Two workers on one machine under two names (a systemd unit and a DaemonSet): the same
    # two GPUs, by uuid, in both nodes' samples; a third node is another machine.
    unit = node_sample("gpu-07", NOW - timedelta(seconds=1))
    pod = node_sample("gpu-07.example", NOW - timedelta(seconds=2))
    other = node_sample("gpu-08", NOW - timedelta(seconds=1), machine="-08")
    content = holdings(unit, pod, other)
    found = gpus_for(content, 40000 * MIB, NOW)
    assert [(c.node, c.gpu) for c in found] == [
        ("gpu-07", 1),
        ("gpu-08", 1),
        ("gpu-07", 0),
        ("gpu-08", 0),
    ]
    assert shared_gpus(content, NOW) == [
        SharedGpu(uuid=UUID0, nodes=["gpu-07", "gpu-07.example"], gpus=[0, 0]),
        SharedGpu(uuid="GPU-9d2e", nodes=["gpu-07", "gpu-07.example"], gpus=[1, 1]),
    ]
    # Once one of the two stops, the GPUs are its alone again.
    assert shared_gpus(content, NOW + timedelta(seconds=4.5)) == []
    assert gpus_for(content, 40000 * MIB, NOW + timedelta(seconds=4.5))[0].node == "gpu-07"
