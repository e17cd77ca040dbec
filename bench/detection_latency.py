"""Detection latency: from a fallback becoming observable to its FallbackEvent at a subscriber.

`placewatch run` at a given interval against a nats-server this script
starts, with the test suite's fake nvidia-smi on PATH (it re-reads its
answer files on every call) and one shard, a real sleeping process placed
on GPU 0 through a shards file, its engine log followed. Two kinds of
evidence, each over several repetitions, each started at a random moment of
the tick cycle:

- tool: the fake tool's compute-apps answer stops listing the shard's pid
  (the GPU then holds none of its memory): found at the next tick, so the
  target is one interval;
- log: `load_tensors: offloaded 0/29 layers to GPU` is appended to the
  shard's log: the worker follows logs every 0.2 s and ticks at once on
  new evidence, so the target is 0.5 s;
- log after a tick: the same line, written as a telemetry message arrives:
  the tick on new evidence then comes soonest after a scheduled one;
- new process: a worker with discovery on, and an engine process started (a process called
  llama-server asking for GPU 0 with `-ngl 99`, which holds nothing there): found by the
  tick's look at new pids and judged at the next tick, so the target is one interval. Its
  clock starts when the process is started.

The clock starts when the file is written and stops when the subscriber
(nats-py, on `placewatch.fallback.>`) has the firing event; each repetition
is undone (a resolved event) before the next. The worker's telemetry over the
shard's repetitions is its load, printed beside the latencies: a worker that
ticked under 95 % of its intervals (bench/load.py) was not at the interval
named, and the script exits 1.

    python bench/detection_latency.py [--interval S] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import nats
from anyio.streams.memory import MemoryObjectReceiveStream
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import Offered, offered  # noqa: E402
from bench.servers import free_port, nats_server, worker_argv, worker_env  # noqa: E402
from bench.synthetic import query_apps_of, query_gpu  # noqa: E402
from placewatch.schemas import FallbackEvent, decode  # noqa: E402

from tests.conftest import SLEEP, FakeGpuTools  # noqa: E402

LOG_TARGET_S = 0.5
GPU_ON = "load_tensors: offloaded 29/29 layers to GPU\n"
GPU_OFF = "load_tensors: offloaded 0/29 layers to GPU\n"


class Shard:
    """The shard's process, its log, and the fake tool's view of its GPU memory."""

    def __init__(self, tools: FakeGpuTools, where: Path) -> None:
        self.tools = tools
        self.proc = subprocess.Popen(["sleep", "3600"], start_new_session=True)
        self.log = where / "llama-server.log"
        # No offload line yet: memory alone decides (a full offload would outrank it).
        self.log.write_text("main: build = 4404 (0b3863ff)\n")
        self.file = where / "shards.toml"
        self.file.write_text(
            f'[[shard]]\nid = "llama-a"\npid = {self.proc.pid}\ngpus = [0]\n'
            f'log_path = "{self.log}"\n'
        )
        tools.nvidia_smi(query_gpu(1, used_mib=400), self.apps(listed=True))

    def apps(self, listed: bool) -> str:
        return query_apps_of([(0, self.proc.pid)] if listed else [])

    def list_pid(self, listed: bool) -> None:
        self.tools.write("nvidia-smi", "query-compute-apps.csv", self.apps(listed))

    def say(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(line)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def firing_events(
    url: str,
) -> tuple[NATS, MemoryObjectReceiveStream[tuple[float, FallbackEvent]]]:
    """A subscriber on `placewatch.fallback.>`: each event with the time it arrived."""
    nc = await nats.connect(url)
    send, receive = anyio.create_memory_object_stream[tuple[float, FallbackEvent]](100)

    async def arrived(msg: Msg) -> None:
        send.send_nowait((time.time(), decode(msg.data, FallbackEvent, msg.headers)))

    await nc.subscribe("placewatch.fallback.>", cb=arrived)
    return nc, receive


async def run_new(url: str, where: Path, interval: float, repeats: int) -> list[float]:
    """The new-process case: an engine started at a random moment of the tick cycle."""
    nc, receive = await firing_events(url)
    link = where / "llama-server"
    link.symlink_to(sys.executable)
    latencies = []
    await anyio.sleep(interval * 2 + 1)
    for _ in range(repeats):
        await anyio.sleep(random.uniform(0.5, 0.5 + interval))
        port = free_port()
        started = time.time()
        proc = await anyio.open_process(
            [str(link), "-c", SLEEP, "--port", str(port), "-ngl", "99"],
            env={"CUDA_VISIBLE_DEVICES": "0"},
        )
        with anyio.fail_after(interval * 3 + 10):
            async for at, event in receive:
                if event.status.shard == f"llama-server-{port}" and event.state == "firing":
                    latencies.append(at - started)
                    break
        proc.kill()
        await proc.wait()
    await nc.close()
    return latencies


async def run(
    url: str, shard: Shard, interval: float, repeats: int
) -> tuple[dict[str, list[float]], Offered]:
    """The latencies of each kind of evidence, and the worker's ticks over them."""
    nc, receive = await firing_events(url)
    ticks = anyio.Event()
    ticked_at: list[float] = []

    async def ticked(msg: Msg) -> None:
        nonlocal ticks
        ticked_at.append(time.time())
        ticks.set()
        ticks = anyio.Event()

    await nc.subscribe("placewatch.telemetry.>", cb=ticked)

    async def next_event(state: str, within: float) -> float:
        with anyio.fail_after(within):
            async for at, event in receive:
                if event.state == state:
                    return at
        raise RuntimeError("the subscription ended")

    async def settle(undo: float) -> None:
        """Wait for the undo's resolved event, then for a random moment of the cycle."""
        await next_event("resolved", undo)
        await anyio.sleep(random.uniform(0.5, 0.5 + interval))

    latencies: dict[str, list[float]] = {"tool": [], "log": [], "log after a tick": []}
    deadline = interval * 3 + 10
    # The first ticks: the shard is judged `gpu` and stays so; nothing fires.
    await anyio.sleep(interval * 2 + 1)
    began = time.time()
    for _ in range(repeats):
        started = time.time()
        shard.list_pid(False)
        latencies["tool"].append(await next_event("firing", deadline) - started)
        shard.list_pid(True)
        await settle(deadline)
    for kind in ("log", "log after a tick"):
        for _ in range(repeats):
            if kind == "log after a tick":
                await ticks.wait()
            started = time.time()
            shard.say(GPU_OFF)
            latencies[kind].append(await next_event("firing", deadline) - started)
            shard.say(GPU_ON)
            await settle(deadline)
    await nc.close()
    window = time.time() - began
    sent = sum(1 for t in ticked_at if t >= began)
    return latencies, offered("ticks", asked_per_s=1 / interval, sent=sent, window_s=window, edge=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, nats_server() as url:
        tools = FakeGpuTools(Path(tmp) / "fake-gpu")
        shard = Shard(tools, Path(tmp))
        argv = worker_argv(
            url,
            args.interval,
            "--shards",
            str(shard.file),
            "--grace",
            "0",
            "--no-discover",
            "--log-level",
            "warning",
        )
        env = tools.env(worker_env(tools.bin))
        with open(Path(tmp) / "worker.log", "w") as log:
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
            try:
                latencies, load = anyio.run(run, url, shard, args.interval, args.repeats)
            finally:
                worker.terminate()
                worker.wait(10)
                shard.stop()
            tools.nvidia_smi(query_gpu(1, used_mib=400), query_apps_of([]))
            argv = worker_argv(url, args.interval, "--grace", "0", "--log-level", "warning")
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
            try:
                latencies["new process"] = anyio.run(
                    run_new, url, Path(tmp), args.interval, args.repeats
                )
            finally:
                worker.terminate()
                worker.wait(10)
    print(
        f"detection latency: `placewatch run --interval {args.interval:g}`, one shard, "
        f"{args.repeats} repetitions each (load {os.getloadavg()[0]:.2f})"
    )
    print(f"{'evidence':<18}{'p50':>8}{'max':>8}{'target':>8}{'max/target':>12}")
    targets = {
        "tool": args.interval,
        "log": LOG_TARGET_S,
        "log after a tick": LOG_TARGET_S,
        "new process": args.interval,
    }
    for kind, target in targets.items():
        found = latencies[kind]
        print(
            f"{kind:<18}{statistics.median(found):>7.2f}s{max(found):>7.2f}s{target:>7.2f}s"
            f"{max(found) / target:>12.2f}"
        )
    print("every latency, s:", {k: [round(v, 3) for v in vs] for k, vs in latencies.items()})
    print(load.line())
    if not load.met:
        sys.exit(1)


if __name__ == "__main__":
    main()
