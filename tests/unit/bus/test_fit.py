"""Every message fits the server's max payload: trimmed, saying what was left out, or refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from placewatch.schemas import (
    ComputeStatus,
    DeviceUse,
    FallbackEvent,
    GpuProcess,
    GpuSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    ShardBrief,
    SourceStatus,
    decode,
    encode,
    lean,
)
from placewatch.worker.bus.fit import REASON_KEPT, fit, size

WHEN = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


def big_status() -> ComputeStatus:
    return ComputeStatus(
        node="gpu-07",
        shard="llama",
        session="s",
        time=WHEN,
        placed_gpus=list(range(64)),
        devices=[DeviceUse(index=i, uuid=f"GPU-{i:036d}", used_bytes=1 << 30) for i in range(8)],
        verdict="gone",
        reason="no running process matches '" + "x" * 3000 + "'; start the engine",
        evidence=[f"load_tensors: line {i} " + "y" * 250 for i in range(5)],
    )


def test_a_message_that_fits_goes_out_whole_and_its_size_counts_the_headers() -> None:
    status = big_status()
    fitted = fit(status, 1 << 20, msg_id="gpu-07.llama.s.1")
    assert fitted is not None and not fitted.trimmed
    assert fitted.message is status
    payload, headers = encode(status, msg_id="gpu-07.llama.s.1")
    assert (fitted.payload, fitted.headers) == (payload, headers)
    header_block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    assert size(payload, headers) == len(payload) + len(header_block.encode())


def test_a_status_too_large_is_cut_largest_list_first_saying_how_much() -> None:
    status = big_status()
    whole = len(encode(status)[0])
    fitted = fit(status, 1500)
    assert fitted is not None and fitted.trimmed
    assert size(fitted.payload, fitted.headers) <= 1500 < whole
    kept = decode(fitted.payload, ComputeStatus)
    assert kept.omitted == fitted.omitted
    for field in ("evidence", "devices", "placed_gpus"):
        assert len(getattr(kept, field)) + kept.omitted.get(field, 0) == len(getattr(status, field))
    assert kept.evidence == status.evidence[len(status.evidence) - len(kept.evidence) :]
    assert kept.placed_gpus == status.placed_gpus[: len(kept.placed_gpus)]
    assert len(kept.reason) == REASON_KEPT and kept.reason.endswith("…")
    assert kept.omitted["reason"] == len(status.reason) - REASON_KEPT + 1
    assert (kept.node, kept.shard, kept.verdict) == ("gpu-07", "llama", "gone")


def test_a_fallback_event_is_cut_in_its_status() -> None:
    event = FallbackEvent(state="firing", status=big_status())
    fitted = fit(event, 2000, msg_id="gpu-07.llama.s.1.firing")
    assert fitted is not None and fitted.trimmed
    kept = decode(fitted.payload, FallbackEvent)
    assert kept.state == "firing" and kept.status.omitted == fitted.omitted
    assert fitted.headers["Nats-Msg-Id"] == "gpu-07.llama.s.1.firing"


def many() -> tuple[NodeInventory, NodeTelemetry]:
    """A node of 8 GPUs, 64 processes on each, and 256 shards."""
    return lean.split(
        NodeSample(
            node="gpu-07",
            session="s",
            seq=1,
            time=WHEN,
            interval_s=2.0,
            gpus=[
                GpuSample(
                    index=i,
                    processes=[
                        GpuProcess(pid=1000 + 64 * i + p, used_bytes=1 << 30, name="/usr/bin/x")
                        for p in range(64)
                    ],
                )
                for i in range(8)
            ],
            shards=[ShardBrief(shard=f"shard-{n:04d}", verdict="unknown") for n in range(256)],
            sources=[SourceStatus(name="nvml", ok=True)],
        )
    )


def test_telemetry_of_many_processes_and_shards_is_cut_in_its_longest_parts() -> None:
    _, telemetry = many()
    whole = fit(telemetry, 60_000)
    assert whole is not None and not whole.trimmed

    tight = fit(telemetry, 6_000)
    assert tight is not None and size(tight.payload, tight.headers) <= 6_000
    kept = decode(tight.payload, NodeTelemetry)
    assert len(kept.shards) + kept.omitted["shards"] == 256
    shown = sum(len(g.processes) for g in kept.gpus)
    assert shown + kept.omitted["gpus.processes"] == 8 * 64
    assert [g.index for g in kept.gpus] == list(range(8))  # every GPU still there
    assert list(kept.shards) == list(telemetry.shards)[: len(kept.shards)]  # the first kept
    assert kept.inventory == telemetry.inventory


def test_an_inventory_too_large_keeps_its_id_and_says_what_it_left_out() -> None:
    inventory, _ = many()
    tight = fit(inventory, 4_000)
    assert tight is not None and size(tight.payload, tight.headers) <= 4_000
    kept = decode(tight.payload, NodeInventory)
    assert kept.id == inventory.id  # the content it names is the whole
    assert len(kept.processes) + kept.omitted["processes"] == 8 * 64
    assert [g.index for g in kept.gpus] == list(range(8))


def test_a_limit_nothing_fits_in_is_none_not_a_loop() -> None:
    assert fit(big_status(), 100) is None


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_trimming_works_in_either_encoding(encoding: str) -> None:
    fitted = fit(big_status(), 1500, encoding)  # type: ignore[arg-type]
    assert fitted is not None and size(fitted.payload, fitted.headers) <= 1500
    assert decode(fitted.payload, ComputeStatus, fitted.headers).omitted == fitted.omitted
