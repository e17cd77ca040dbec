"""`placewatch forget --silent-for` over a fleet: what it costs to find the silent nodes.

A real nats-server is given N nodes' last inventory and telemetry (8 GPUs, 64 processes and 16
shards each, as bench/synthetic.py makes them: about 10 KB of JSON a node), as the streams keep
them, and the statuses of 2 shards a node in the compute bucket. Then `placewatch forget
--silent-for 1s --dry-run` runs as a user runs it, once per fleet size, and the script prints
its wall time, CPU and peak RSS (the child's, from getrusage), and what it costs a node.
Its load is the fleet: a size whose nodes forget did not all find silent did not offer it,
and the script says so and exits 1.

    .venv/bin/python bench/forget_fleet.py [--nodes 1000,5000,20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import nats_server, node_env, placewatch_cmd  # noqa: E402
from bench.synthetic import node_messages  # noqa: E402
from placewatch.schemas import ComputeStatus, encode, subjects  # noqa: E402
from placewatch.schemas.streams import for_prefix  # noqa: E402
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream  # noqa: E402

TEMPLATE = "gpu-node-0001"


async def fill(url: str, first: int, last: int) -> int:
    """Nodes first..last-1 kept on the bus; the bytes stored."""
    inventory, telemetry = node_messages(TEMPLATE)
    (inv, inv_headers), (tel, tel_headers) = encode(inventory), encode(telemetry)
    stored = 0
    async with await nats.connect(url) as nc:
        js = nc.jetstream()
        stores = for_prefix(subjects.DEFAULT_PREFIX)
        for stream in (stores.telemetry, stores.inventory, stores.events):
            await ensure_stream(js, stream, StreamSettings())
        compute = await ensure_bucket(js, stores.compute, StreamSettings())
        pending: list[Coroutine[Any, Any, object]] = []
        for i in range(first, last):
            node = f"gpu-node-{i:05d}"
            name = node.encode()
            for subject, payload, headers in (
                (subjects.inventory(node), inv, inv_headers),
                (subjects.telemetry(node), tel, tel_headers),
            ):
                data = payload.replace(TEMPLATE.encode(), name)
                stored += len(data)
                pending.append(js.publish(subject, data, headers=headers))
            for shard in ("llama-8b", "embed"):
                status = ComputeStatus(
                    node=node, shard=shard, session="s1", time=datetime.now(UTC), verdict="gpu"
                )
                data = encode(status)[0]
                stored += len(data)
                pending.append(compute.put(subjects.shard_key(node, shard), data))
            if len(pending) >= 512:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    return stored


def forget_once(url: str) -> tuple[float, float, float, str]:
    """Wall s, CPU s and peak RSS MiB of one `forget --silent-for 1s --dry-run`; its first
    line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*placewatch_cmd(), "forget", "--silent-for", "1s", "--dry-run", "--nats", url],
        env=node_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"forget failed ({done.returncode}): {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    first = done.stdout.split("\n", 1)[0]
    return wall, cpu, after.ru_maxrss / 1024, first[: first.index(":")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", default="1000,5000,20000", help="fleet sizes, ascending")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.nodes.split(","))
    print(f"load {os.getloadavg()[0]:.1f}; peak RSS is the largest child's so far")
    print("| nodes | bytes kept | wall s | CPU s | peak RSS MiB | CPU ms a node | said |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    every_offered = True
    with nats_server() as url:
        stored, held = 0, 0
        for size in sizes:
            stored += asyncio.run(fill(url, held, size))
            held = size
            time.sleep(1.1)  # every node silent for more than 1 s
            wall, cpu, rss, said = forget_once(url)
            print(
                f"| {size:,} | {stored / 1e6:.0f} MB | {wall:.2f} | {cpu:.2f} | {rss:.0f} | "
                f"{cpu * 1000 / size:.3f} | {said} |",
                flush=True,
            )
            if not said.startswith(f"{size} of {size} nodes silent"):
                print(f"NOT OFFERED: forget did not find the {size:,} nodes silent: {said}")
                every_offered = False
    return 0 if every_offered else 1


if __name__ == "__main__":
    sys.exit(main())
