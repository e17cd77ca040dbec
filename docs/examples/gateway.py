"""A gateway's first look at the fleet, from the bus.

    .venv/bin/python docs/examples/gateway.py nats://127.0.0.1:4222 [PREFIX]

Prints each live node's GPUs with their free memory, each stale node (silent past three of
its intervals: its GPUs are not capacity, whatever it last said) and each shard's verdict,
then exits. Needs `placewatch.consumer` (this repository installed) and nothing else of the
worker.
"""

from __future__ import annotations

import asyncio
import sys

import nats

from placewatch.consumer import FleetView

GIB = 1 << 30


async def main(url: str, prefix: str) -> None:
    nc = await nats.connect(url)
    view = FleetView(nc, prefix)
    await view.start()  # the last sample of every node and status of every shard, at once
    try:
        stale = {s.node: s for s in view.stale()}
        for t in view.snapshot().nodes:
            if t.node in stale:
                print(f"{t.node} stale: last sample {stale[t.node].age_s:.0f} s ago, not capacity")
                continue
            for g in t.gpus:
                free = "?" if g.memory_free_bytes is None else f"{g.memory_free_bytes / GIB:.1f}"
                print(f"{t.node} GPU {g.index} {g.name}: {free} GiB free")
        for s in view.snapshot().shards:
            why = "" if s.verdict in ("gpu", "cpu") else f" ({s.reason})"
            print(f"{s.node} shard {s.shard}: {s.verdict}{why}")
    finally:
        await view.stop()
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "placewatch"))
