"""What a FleetView costs a gateway per node it holds, and what a full collection costs.

N simulated 8-GPU nodes (64 processes, 16 shards) are handed to a FleetView, each as the
node publishes it: its NodeInventory, then its NodeTelemetry, JSON with the worker's
headers, through the view's arrival path (decoded and checked, as from the bus). Measured
side by side in one run:

- the lean view: what it holds (each node's latest messages as they came, decoded when
  asked for), its RSS growth per node, the objects the garbage collector tracks, and the
  time of a full collection (`gc.collect()`, the best and the worst of five);
- the same nodes held decoded, as the view held them before schema 2 (one NodeSample per
  node, what `FleetView.sample()` gives): the same figures.

Targets (issue: fleet scale): at most 10 KiB per held node and a full collection within
100 ms with 50,000 nodes held.

    python bench/fleet_memory.py [--nodes N] [--encoding json|msgpack]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synthetic import node_messages  # noqa: E402
from placewatch.consumer import FleetView  # noqa: E402
from placewatch.schemas import NodeInventory, NodeTelemetry, encode, subjects  # noqa: E402
from placewatch.schemas.codec import Encoding  # noqa: E402

KIB_TARGET = 10.0
GC_TARGET_MS = 100.0
HOW = {
    "lean": "FleetView (schema 2: messages as they came)",
    "decoded": "a decoded NodeSample per node (as before)",
}


def rss() -> int:
    return int(psutil.Process(os.getpid()).memory_info().rss)


def collection_ms() -> tuple[float, float]:
    took = []
    for _ in range(5):
        start = time.perf_counter()
        gc.collect()
        took.append((time.perf_counter() - start) * 1000)
    return min(took), max(took)


def sent(
    nodes: int, encoding: Encoding
) -> Iterator[tuple[str, tuple[bytes, dict[str, str], bytes, dict[str, str]]]]:
    """Each node, with its inventory and telemetry encoded as the node sends them: new bytes for
    each, as the bus hands them over."""
    inventory, telemetry = node_messages()
    for n in range(nodes):
        node = f"gpu-node-{n:05d}"
        inv = msgspec.structs.replace(inventory, node=node)
        tel = msgspec.structs.replace(telemetry, node=node, seq=n)
        yield node, (*encode(inv, encoding), *encode(tel, encoding))


def hold(how: str, nodes: int, encoding: Encoding) -> dict[str, Any]:
    """One way of holding the fleet, in this process: what it costs."""
    gc.collect()
    before = rss()
    view = FleetView(cast(Any, None))  # never started: the bench hands it the messages
    size = 0
    for node, (inv, inv_headers, tel, tel_headers) in sent(nodes, encoding):
        size += len(inv) + len(tel)
        view._hold(inv, inv_headers, NodeInventory, subjects.inventory(node))
        view._hold(tel, tel_headers, NodeTelemetry, subjects.telemetry(node))
    assert len(view.nodes) == len(view.inventories) == nodes
    held: Any = view
    if how == "decoded":
        held = {node: view.sample(node) for node in view.nodes}
        assert all(s is not None for s in held.values())
        del view
    gc.collect()
    fastest, slowest = collection_ms()
    return {
        "kib": (rss() - before) / nodes / 1024,
        "tracked": len(gc.get_objects()),
        "gc_best": fastest,
        "gc_worst": slowest,
        "bytes": size / nodes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000, help="nodes held (default 50,000)")
    parser.add_argument("--encoding", choices=("json", "msgpack"), default="json")
    parser.add_argument("--only", choices=HOW, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(hold(args.only, args.nodes, args.encoding)))
        return 0

    rows = {}
    for how in HOW:  # each in a process of its own, so that one's memory is not the other's
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--nodes",
                str(args.nodes),
                "--encoding",
                args.encoding,
                "--only",
                how,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows[how] = json.loads(child.stdout)
    lean, old = rows["lean"], rows["decoded"]
    print(
        f"{args.nodes:,} nodes of 8 GPUs, 64 processes, 16 shards; {args.encoding}: "
        f"{lean['bytes']:,.0f} bytes a node (inventory and telemetry)"
    )
    print(f"{'held':44} {'KiB/node':>9} {'tracked objects':>16} {'full gc, ms':>16}")
    for how, r in rows.items():
        print(
            f"{HOW[how]:44} {r['kib']:>9.2f} {r['tracked']:>16,} "
            f"{r['gc_best']:>7.1f} to {r['gc_worst']:<6.1f}"
        )
    print(
        f"target: at most {KIB_TARGET:.0f} KiB a node: {lean['kib']:.2f} "
        f"({lean['kib'] / KIB_TARGET:.2f} of it; held decoded: {old['kib']:.2f}, "
        f"{old['kib'] / lean['kib']:.1f}x)"
    )
    print(
        f"target: a full collection within {GC_TARGET_MS:.0f} ms: worst {lean['gc_worst']:.1f} ms "
        f"({lean['gc_worst'] / GC_TARGET_MS:.2f} of it; held decoded: {old['gc_worst']:.1f} ms)"
    )
    met = lean["kib"] <= KIB_TARGET and lean["gc_worst"] <= GC_TARGET_MS
    print("both met" if met else "NOT MET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
