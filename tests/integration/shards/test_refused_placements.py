"""A refused placement is answered on its own key: a real worker, a real nats-server, real
processes as shards and a stand-in nvidia-smi naming their pids."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import anyio
import nats

from placewatch.schemas import ComputeStatus, decode, subjects
from placewatch.schemas.streams import COMPUTE

from tests.conftest import (
    FIXTURES,
    GPU0,
    GPU1,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    start,
    wait_older_than,
)
from tests.integration.test_shards_end_to_end import events_now, put
from tests.support.eventually import eventually
from tests.support.natsproto import RawSubscriber

NODE = "n3"
INTERVAL_S = 1.0


async def kept(url: str, shard: str) -> ComputeStatus | None:
    """The shard's status in the compute bucket, or None while it holds none."""
    async with await nats.connect(url) as nc:
        try:
            kv = await nc.jetstream().key_value(COMPUTE.name)
            entry = await kv.get(subjects.shard_key(NODE, shard))
        except nats.errors.Error:
            return None
        return decode(entry.value or b"", ComputeStatus)


def verdict_kept(url: str, shard: str) -> tuple[str, str] | None:
    status = anyio.run(kept, url, shard, backend="asyncio")
    return None if status is None else (status.verdict, status.reason)


def put_now(url: str, shard: str, value: dict[str, object] | bytes | None) -> None:
    raw = value if not isinstance(value, dict) else json.dumps(value).encode()
    anyio.run(put, url, subjects.shard_key(NODE, shard), raw, backend="asyncio")


def test_a_refused_placement_is_answered_on_its_key_until_it_is_mended_or_removed(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    url = nats_server.url
    held, other = start(shard_procs, "held"), start(shard_procs, "other")
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv",
        apps({held: (GPU1, 4000), other: (GPU0, 6000)}),
    )
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "file-shard"\npid = {held}\ngpus = [1]\n')
    wait_older_than([held, other], 1.2)
    worker = Worker(
        "--nats", url, "--node", NODE, "--shards", str(shards), "--grace", "1",
        "--interval", str(INTERVAL_S), "--no-discover", env=fake_gpu.env(),
    )  # fmt: skip
    workers.append(worker)
    eventually(lambda: verdict_kept(url, "file-shard") is not None, what="file-shard judged")

    # A second placement of the process file-shard holds: refused, and told on its key.
    with RawSubscriber(url, subjects.compute(NODE, "dup")) as sub:
        asked = time.monotonic()
        put_now(url, "dup", {"id": "dup", "pid": held, "gpus": [0]})
        status = sub.next(timeout=10).json()
        answered_s = time.monotonic() - asked
    assert isinstance(status, dict)
    assert (status["shard"], status["verdict"]) == ("dup", "unknown")
    assert status["reason"] == (
        f"placement refused: placement 'dup' of the placements bucket names process {held}, "
        "which shards-file entry 'file-shard' holds: one process is one shard, so it is "
        "refused and 'file-shard' keeps it; remove one of the two placements"
    )
    # Within one interval of the tick that reads the placement (a tick's own work besides).
    assert answered_s < 2 * INTERVAL_S + 0.5, answered_s

    # A value that is not a placement: refused, and told on its key.
    put_now(url, "bad", b"{not json")
    eventually(lambda: (verdict_kept(url, "bad") or ("",))[0] == "unknown", what="bad refused")
    reason = verdict_kept(url, "bad")
    assert reason is not None
    assert reason[1].startswith("placement refused: KV placewatch_placements key n3.bad: not JSON")

    # Mended: the real verdict replaces the refusal. Removed: gone.
    put_now(url, "dup", {"id": "dup", "pid": other, "gpus": [0]})
    eventually(lambda: (verdict_kept(url, "dup") or ("",))[0] == "gpu", what="dup judged")
    put_now(url, "bad", None)
    eventually(lambda: (verdict_kept(url, "bad") or ("",))[0] == "gone", what="bad gone")
    assert verdict_kept(url, "bad") == (
        "gone",
        "no longer watched: its refused placement was removed",
    )
    assert verdict_kept(url, "file-shard") == (
        "gpu",
        "holds 3.9 GiB on GPU 1 as placed",
    )
    assert events_now(url) == [
        ("compute", "file-shard", "gpu"),
        ("compute", "dup", "unknown"),
        ("compute", "bad", "unknown"),
        ("compute", "dup", "gpu"),
        ("compute", "bad", "gone"),
    ]  # a refusal fires nothing
    code, _, _, err = worker.stop()
    assert code == 0, err
