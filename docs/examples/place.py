"""Where could a shard of N bytes go now? A gateway's placement question, from the bus.

    .venv/bin/python docs/examples/place.py nats://127.0.0.1:4222 --bytes 20GiB [--max-age SECONDS]

Prints each healthy GPU of a live node that has that much free, the most free first, with
how old its reading is; then the GPUs left out as unhealthy, with what to do; then the GPUs
two nodes report (two workers on one machine under two names; each is offered once); then
the nodes gone stale. Exits 0 when some GPU can take it, 1 when none can. Needs
`placewatch.consumer` (this repository installed) and nothing else of the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

import nats

from placewatch.consumer import FleetView

GIB = 1 << 30
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size(text: str) -> int:
    """`20GiB`, `512MiB` or a number of bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)?", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 20GiB or 512MiB")
    return int(float(match.group(1)) * UNITS[match.group(2) or ""])


async def main(url: str, nbytes: int, max_age: float | None, prefix: str) -> int:
    nc = await nats.connect(url)
    view = FleetView(nc, prefix)
    await view.start()  # the last sample of every node, at once
    try:
        candidates = view.gpus_for(nbytes, max_age=max_age)
        for c in candidates:
            foreign = "?" if c.foreign_bytes is None else f"{c.foreign_bytes / GIB:.1f}"
            print(
                f"{c.node} GPU {c.gpu} {c.name}: {c.free_bytes / GIB:.1f} GiB free, "
                f"{foreign} GiB foreign, {c.age_s:.1f} s old"
            )
        if not candidates:
            print(f"no GPU of a live node has {nbytes / GIB:.1f} GiB free")
        for node in sorted(view.holdings().nodes):
            sample = view.sample(node)
            for g in sample.gpus if sample is not None else []:
                if g.health is not None and not g.health.healthy:
                    print(f"unhealthy: {node} GPU {g.index}: {'; '.join(g.health.problems)}")
        for shared in view.shared_gpus(max_age):
            print(f"shared: {shared.uuid} is reported by {', '.join(shared.nodes)}")
        for s in view.stale(max_age):
            print(f"stale: {s.node}, last sample {s.age_s:.0f} s ago (limit {s.limit_s:g} s)")
    finally:
        await view.stop()
        await nc.close()
    return 0 if candidates else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a NATS server, such as nats://127.0.0.1:4222")
    parser.add_argument("--bytes", type=size, required=True, help="what the shard needs: 20GiB")
    parser.add_argument(
        "--max-age", type=float, help="seconds after which a node is stale (3 intervals)"
    )
    parser.add_argument("--prefix", default="placewatch")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.url, args.bytes, args.max_age, args.prefix)))
