"""A node for consumer tests: a real worker, real processes as shards, a fake nvidia-smi.

Two A100s (tests/fixtures/nvidia-smi/a100x2-query-gpu.csv). Shard `holding`
holds 30000 MiB on GPU 0, where it was placed: `gpu`. Shard `idle`, placed
on GPU 1, holds nothing there: `cpu_fallback`, a firing fallback, until
`idle_on_gpu(True)` gives it 9000 MiB there and it resolves. `idle_on_gpu0()` gives it
9000 MiB on GPU 0 instead, outside its placement: `misplaced`, a verdict that changes
inside the firing fallback (a status, no new event).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anyio
import nats
import nats.errors

from placewatch.schemas import ComputeStatus, FallbackEvent, decode, decode_any, subjects
from placewatch.schemas.streams import COMPUTE, EVENTS, TELEMETRY

from tests.conftest import FIXTURES, GPU0, GPU1, FakeGpuTools, Worker, apps, start, wait_older_than

NODE = "n1"
HOLDING_MIB = 30000
IDLE_MIB = 9000
HEALTH_CSV = FIXTURES / "nvidia-smi" / "a100x2-query-gpu-health.csv"
"""The two A100s with health columns; GPU 1 has 2 uncorrected ECC errors (constructed:
tests/fixtures/nvidia-smi/README.md)."""


def a100x2_health(gpu1_uncorrected: int) -> str:
    """HEALTH_CSV with GPU 1's uncorrected ECC counts set: the same columns whatever the
    count, as a real nvidia-smi's looping query prints the columns it was started with."""
    header, gpu0, gpu1 = HEALTH_CSV.read_text().splitlines()
    columns, cells = header.split(", "), gpu1.split(", ")
    for name in ("ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total"):
        cells[columns.index(name)] = str(gpu1_uncorrected)
    return "\n".join([header, gpu0, ", ".join(cells)]) + "\n"


class ShardNode:
    def __init__(
        self,
        url: str,
        fake_gpu: FakeGpuTools,
        procs: dict[str, subprocess.Popen[bytes]],
        workers: list[Worker],
        tmp_path: Path,
    ) -> None:
        self.url = url
        self.fake_gpu = fake_gpu
        self.workers = workers
        self.holding = start(procs, "holding")
        self.idle = start(procs, "idle")
        fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", self._apps(False))
        shards = tmp_path / "shards.toml"
        shards.write_text(
            f'[[shard]]\nid = "holding"\npid = {self.holding}\ngpus = [0]\n\n'
            f'[[shard]]\nid = "idle"\npid = {self.idle}\ngpus = [1]\n'
        )
        self.args = (
            "--nats",
            url,
            "--node",
            NODE,
            "--shards",
            str(shards),
            "--grace",
            "1",
            "--interval",
            "1",
            "--no-discover",
        )
        self.worker: Worker | None = None
        wait_older_than([self.holding, self.idle], 1.2)

    def _apps(self, idle_on_gpu: bool, idle_gpu: str = GPU1) -> str:
        holders = {self.holding: (GPU0, HOLDING_MIB)}
        if idle_on_gpu:
            holders[self.idle] = (idle_gpu, IDLE_MIB)
        return apps(holders)

    def start(self, *extra: str) -> Worker:
        self.worker = Worker(*self.args, *extra, env=self.fake_gpu.env())
        self.workers.append(self.worker)
        return self.worker

    def stop(self) -> None:
        assert self.worker is not None
        code, _, _, err = self.worker.stop()
        assert code == 0, err
        self.worker = None

    def idle_on_gpu(self, on: bool) -> None:
        self.fake_gpu.write("nvidia-smi", "query-compute-apps.csv", self._apps(on))

    def driver_lost(self, lost: bool) -> None:
        """The driver stops answering (every nvidia-smi fails, the looping one hangs), or
        answers again."""
        if lost:
            self.fake_gpu.write("nvidia-smi", "fail", "9 NVIDIA-SMI has failed")
            self.fake_gpu.write("nvidia-smi", "loop-hang", "")
        else:
            (self.fake_gpu.data / "nvidia-smi" / "fail").unlink()

    def idle_on_gpu0(self) -> None:
        """Shard `idle` computes on GPU 0, though placed on GPU 1: misplaced."""
        self.fake_gpu.write("nvidia-smi", "query-compute-apps.csv", self._apps(True, GPU0))

    def wait_fallback_events(self, count: int, timeout: float = 30) -> list[FallbackEvent]:
        """wait_fallback_events on this node's server; failing, with what the worker logged
        and the fake nvidia-smi was asked last, so that a slow run explains itself."""
        try:
            return wait_fallback_events(self.url, count, timeout)
        except AssertionError as e:
            log = self.worker.err()[-4000:] if self.worker is not None else "(no worker)"
            calls = (self.fake_gpu.data / "nvidia-smi" / "calls.log").read_text()
            calls = "\n".join(calls.splitlines()[-15:])
            raise AssertionError(
                f"{e}\nworker's log:\n{log}\nnvidia-smi's calls:\n{calls}"
            ) from None

    def wait_published(self, idle: str = "cpu_fallback", timeout: float = 20) -> None:
        """Until the bucket holds both shards' statuses, `idle`'s verdict as given, and the
        telemetry stream a sample of the node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if anyio.run(self._published, idle, backend="asyncio"):
                return
            time.sleep(0.2)
        raise AssertionError(f"the worker did not publish idle={idle} within {timeout} s")

    async def _published(self, idle: str) -> bool:
        nc = await nats.connect(self.url)
        try:
            js = nc.jetstream()
            kv = await js.key_value(COMPUTE.name)
            verdicts = {}
            for shard in ("holding", "idle"):
                entry = await kv.get(subjects.shard_key(NODE, shard))
                verdicts[shard] = decode(entry.value or b"", ComputeStatus).verdict
            await js.get_last_msg(TELEMETRY.name, subjects.telemetry(NODE))
        except nats.errors.Error:
            return False
        finally:
            await nc.close()
        return verdicts == {"holding": "gpu", "idle": idle}


async def fallback_events(url: str) -> list[FallbackEvent]:
    """Every fallback event in the events stream, oldest first."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(EVENTS.name)
        found: list[FallbackEvent] = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(EVENTS.name, seq)
            event = decode_any(msg.data or b"", msg.headers or {})
            if isinstance(event, FallbackEvent):
                found.append(event)
        return found
    finally:
        await nc.close()


def wait_fallback_events(url: str, count: int, timeout: float = 30) -> list[FallbackEvent]:
    """The stream's fallback events once there are `count`: a deadline, not a wait (a loaded
    CI machine takes a verdict's change longer to publish)."""
    deadline = time.monotonic() + timeout
    found: list[FallbackEvent] = []
    while time.monotonic() < deadline:
        try:
            found = anyio.run(fallback_events, url, backend="asyncio")
        except nats.errors.Error:
            found = []  # the worker has not created the stream yet
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{len(found)} fallback events, not {count}, within {timeout} s")
