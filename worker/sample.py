"""`placewatch sample`: one tick's sample, no bus needed, as a table or as JSON (the whole
NodeSample: inventory and readings together)."""

from __future__ import annotations

import sys

import anyio
import msgspec

from placewatch.schemas import NodeSample

from .config import Settings
from .pipeline import open_pipeline


def main(settings: Settings, *, as_json: bool) -> int:
    sample = anyio.run(take_one, settings, backend="asyncio")
    if as_json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(sample), indent=2))
        sys.stdout.write("\n")
    else:
        print(describe(sample))
    return 0


async def take_one(settings: Settings) -> NodeSample:
    """The sample of one tick, as `placewatch run` would publish it first."""
    async with open_pipeline(settings) as pipeline:
        return (await pipeline.take()).sample


def describe(t: NodeSample) -> str:
    """A sample as a person reads it at a terminal."""
    lines = [f"node {t.node}  {t.time:%Y-%m-%d %H:%M:%S} UTC"]
    if not t.gpus:
        lines.append("no GPUs found")
    for g in t.gpus:
        util = "-" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
        mem = f"{_gib(g.memory_used_bytes)}/{_gib(g.memory_total_bytes)} GiB"
        temp = "-" if g.temperature_c is None else f"{g.temperature_c:.0f} C"
        power = "-" if g.power_w is None else f"{g.power_w:.0f}"
        if g.power_cap_w is not None:
            power += f"/{g.power_cap_w:.0f}"
        lines.append(
            f"{g.vendor} GPU {g.index}  {g.name or '?'}  util {util}  mem {mem}  {temp}  "
            f"{power} W  {len(g.processes)} process{'' if len(g.processes) == 1 else 'es'}"
        )
        if g.health is not None and not g.health.healthy:
            lines.append(f"  UNHEALTHY: {'; '.join(g.health.problems)}")
    if t.host is not None:
        h = t.host
        cpu = "-" if h.cpu_pct is None else f"{h.cpu_pct:.0f}%"
        lines.append(
            f"host  cpu {cpu} of {h.cpu_count}  memory {_gib(h.memory_available_bytes)} GiB "
            f"available of {_gib(h.memory_total_bytes)}  load {h.load_1m}"
        )
    for b in t.shards:
        pid = f" (pid {b.pid})" if b.pid else ""
        lines.append(f"shard {b.shard}{pid}  {b.verdict}: {b.reason}")
    for s in t.sources:
        state = "ok" if s.ok else f"failed: {s.error}"
        latency = "" if s.latency_ms is None else f" ({s.latency_ms:.0f} ms)"
        lines.append(f"source {s.name}{latency} {state}")
    return "\n".join(lines)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.1f}"
