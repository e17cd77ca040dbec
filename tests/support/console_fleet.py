"""A fleet as an operator finds it, held as a FleetView holds it: `live` nodes of 8 GPUs and 4
shards each (bench/synthetic.py's node), one shard in cpu_fallback on every `every`th, and
`dead` nodes of an earlier run, silent for an hour, each with a shard left in cpu_fallback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from bench.synthetic import node_sample, shard_statuses
from placewatch.consumer.snapshot import FleetState

from tests.support.held import held

NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
DEAD_FOR = timedelta(hours=1)


def live_name(i: int) -> str:
    return f"gpu-{i:04d}"


def dead_name(i: int) -> str:
    return f"old-{i:02d}"


def fleet_state(live: int = 1000, every: int = 71, dead: int = 27) -> FleetState:
    """The fleet at NOW. With the defaults: 1,000 live nodes, 4,000 shards on them of which
    15 in cpu_fallback (gpu-0000, gpu-0071, ...), and 27 dead nodes whose 108 shards hold 27
    fallbacks: 42 firing, 27 of them on silent nodes."""
    model = node_sample("model", gpus=8, shards=4)
    state = FleetState()
    nodes = [(live_name(i), NOW, i % every == 0) for i in range(live)]
    nodes += [(dead_name(i), NOW - DEAD_FOR, True) for i in range(dead)]
    for name, when, falls in nodes:
        gpus = [msgspec.structs.replace(g, uuid=f"GPU-{name}-{g.index}") for g in model.gpus]
        sample = msgspec.structs.replace(model, node=name, time=when, gpus=gpus)
        state.nodes[name], state.inventories[name] = held(sample)
        fallback = frozenset({"shard-01"}) if falls else frozenset()
        for s in shard_statuses(sample, fallback):
            state.shards[(s.node, s.shard)] = s
            if s.verdict == "cpu_fallback":
                state.fallback_since[(s.node, s.shard)] = s.time
    return state
