"""A GPU's health judged from its readings: the same rules for every vendor and tool."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from placewatch.schemas import GpuHealth, GpuSample, NodeSample, NodeTelemetry, decode, encode
from placewatch.schemas.lean import join, split
from placewatch.worker.gpu.health import RESET_XIDS, assess, problems


def gpu(**health: object) -> GpuSample:
    return GpuSample(index=3, uuid="GPU-3", health=GpuHealth(**health))  # type: ignore[arg-type]


def test_counts_of_a_healthy_gpu_leave_it_healthy() -> None:
    judged = assess(
        gpu(
            xid_errors=2,
            last_xid=13,
            ecc_corrected_volatile=40,
            ecc_uncorrected_aggregate=1,
            retired_pages_dbe=1,
            remapped_rows_correctable=5,
            pcie_replays=12,
            clock_events=["sw_power_cap"],
        )
    )
    assert judged.health is not None
    assert judged.health.healthy is True
    assert judged.health.problems == []


@pytest.mark.parametrize(
    ("health", "said"),
    [
        ({"fatal_xid": 79, "last_xid": 13}, "XID 79 (GPU has fallen off the bus): reset the GPU"),
        ({"ecc_uncorrected_volatile": 2}, "2 uncorrected ECC error(s) since the last reset"),
        ({"remapped_rows_failed": True}, "a row remapping failed (no spare memory row left)"),
        ({"remapped_rows_pending": True}, "a row remapping is pending: reset the GPU"),
        ({"retired_pages_pending": True}, "a page retirement is pending: reset the GPU"),
    ],
)
def test_a_fatal_condition_marks_the_gpu_unhealthy_naming_it(
    health: dict[str, object], said: str
) -> None:
    judged = assess(gpu(**health))
    assert judged.health is not None
    assert judged.health.healthy is False
    assert len(judged.health.problems) == 1
    assert judged.health.problems[0].startswith(said)


def test_an_amd_gpu_is_told_amd_smi_s_reset() -> None:
    amd = GpuSample(index=0, vendor="amd", health=GpuHealth(ecc_uncorrected_volatile=1))
    assert problems(amd.health or GpuHealth(), "amd") == [
        "1 uncorrected ECC error(s) since the amdgpu driver loaded: drain the GPU, then reset "
        "it (amd-smi reset -G) or reboot; the count clears when the driver loads again"
    ]


def test_a_condition_that_clears_makes_the_gpu_healthy_again() -> None:
    was = assess(gpu(remapped_rows_pending=True))
    assert was.health is not None
    cleared = msgspec.structs.replace(
        was, health=msgspec.structs.replace(was.health, remapped_rows_pending=False)
    )
    now = assess(cleared)
    assert now.health is not None
    assert (now.health.healthy, now.health.problems) == (True, [])


def test_a_gpu_with_no_health_read_is_left_as_it_is() -> None:
    plain = GpuSample(index=0)
    assert assess(plain) is plain


def test_every_reset_xid_is_named() -> None:
    for xid, what in RESET_XIDS.items():
        judged = assess(gpu(fatal_xid=xid))
        assert judged.health is not None
        assert judged.health.problems == [
            f"XID {xid} ({what}): reset the GPU (nvidia-smi -r, with nothing running on it) "
            "or reboot the node"
        ]


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_health_and_readings_survive_the_lean_split_and_join(encoding: str) -> None:
    judged = assess(gpu(fatal_xid=48, xid_errors=3, last_xid=48, pcie_gen=4, pcie_width=16))
    judged = msgspec.structs.replace(
        judged, sm_clock_mhz=1980, memory_clock_mhz=2619, memory_util_pct=12.0, energy_j=5.5e6
    )
    sample = NodeSample(
        node="n1",
        session="s",
        seq=1,
        time=datetime(2026, 12, 1, tzinfo=UTC),
        interval_s=2.0,
        gpus=[judged],
    )
    inventory, telemetry = split(sample)
    payload, headers = encode(telemetry, encoding)  # type: ignore[arg-type]
    back = join(inventory, decode(payload, NodeTelemetry, headers))
    assert back.gpus[0].health == judged.health
    assert back.gpus[0].health is not None
    assert back.gpus[0].health.problems == [
        "XID 48 (double-bit ECC error): reset the GPU (nvidia-smi -r, with nothing running on "
        "it) or reboot the node"
    ]
    assert (back.gpus[0].sm_clock_mhz, back.gpus[0].memory_clock_mhz) == (1980, 2619)
    assert (back.gpus[0].memory_util_pct, back.gpus[0].energy_j) == (12, 5.5e6)


@pytest.mark.parametrize(
    ("action", "said"),
    [
        ("reset", "the driver asks for a GPU recovery (reset): reset the GPU (nvidia-smi -r"),
        ("reboot", "the driver asks for a GPU recovery (reboot): reboot the node"),
        ("drain_p2p", "the driver asks for a GPU recovery (drain_p2p): stop its peer-to-peer"),
        ("action_9", "the driver asks for a GPU recovery (action_9): see the driver's"),
    ],
)
def test_a_recovery_the_driver_asks_for_is_a_problem(action: str, said: str) -> None:
    judged = assess(gpu(recovery_action=action))
    assert judged.health is not None and judged.health.healthy is False
    assert [p[: len(said)] for p in judged.health.problems] == [said]


def test_no_recovery_asked_for_is_healthy() -> None:
    judged = assess(gpu(recovery_action="none"))
    assert judged.health is not None and judged.health.problems == []
