"""What placewatch's LiteLLM filter costs a request, and how soon a status takes effect.

    .venv/bin/python bench/litellm_filter.py [--shards 1000] [--group 4] [--flips 20]

1. Cost: `PlacewatchFilter.async_filter_deployments` over a model group of `--group`
   deployments, in a view of `--shards` shards (one in 16 `cpu_fallback`, and the first of
   the group): the filter's time a request, as LiteLLM's Router calls it, the Router's own
   work left out.
2. Reaction: a real nats-server; the filter follows it through its own FleetView
   (`follow`); a publisher flips one shard's status between `gpu` and `cpu_fallback` on its
   compute subject while a loop asks the filter as requests would, back to back. The time
   from the publish to the first request whose candidates it changed, median and worst of
   `--flips`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch from the web
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import nats_server
from placewatch.consumer.gateway.litellm import PlacewatchFilter, follow
from placewatch.consumer.snapshot import FleetState
from placewatch.schemas import ComputeStatus, Endpoint, encode, subjects
from placewatch.schemas.messages import Verdict


def status(n: int, verdict: Verdict) -> ComputeStatus:
    return ComputeStatus(
        node=f"gpu-{n // 8}",
        shard=f"s{n}",
        session="bench",
        time=datetime.now(UTC),
        verdict=verdict,
        reason="bench",
        endpoint=Endpoint(host=f"10.0.{n // 250}.{n % 250}", port=8080),
    )


def group(size: int) -> list[dict[str, Any]]:
    return [
        {
            "model_info": {"id": f"d{n}"},
            "litellm_params": {"api_base": f"http://10.0.{n // 250}.{n % 250}:8080/v1"},
        }
        for n in range(0, 16 * size, 16)  # shard 0, 16, 32...: the first is cpu_fallback
    ]


async def cost(shards: int, size: int, calls: int = 20_000) -> float:
    state = FleetState()
    for n in range(shards):
        s = status(n, "cpu_fallback" if n % 16 == 8 or n == 0 else "gpu")
        state.shards[s.node, s.shard] = s
    routing = PlacewatchFilter(state)
    deployments = group(size)
    kept = await routing.async_filter_deployments("m", deployments, None)
    assert len(kept) == size - 1, kept
    started = time.perf_counter()
    for _ in range(calls):
        await routing.async_filter_deployments("m", deployments, None)
    return (time.perf_counter() - started) / calls


async def reaction(url: str, size: int, flips: int) -> list[float]:
    nc = await nats.connect(url)
    routing = await follow(nc)
    deployments = group(size)
    found = []
    for flip in range(flips + 1):
        verdict: Verdict = "cpu_fallback" if flip % 2 == 0 else "gpu"
        want = size - 1 if verdict == "cpu_fallback" else size
        s = status(0, verdict)
        data, headers = encode(s)
        published = time.perf_counter()
        await nc.publish(subjects.compute(s.node, s.shard), data, headers=headers)
        while len(await routing.async_filter_deployments("m", deployments, None)) != want:  # noqa: ASYNC110 - requests, back to back
            await asyncio.sleep(0)
        if flip:
            found.append(time.perf_counter() - published)
    await routing.stop()
    await nc.close()
    return found


async def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--shards", type=int, default=1000)
    args.add_argument("--group", type=int, default=4)
    args.add_argument("--flips", type=int, default=20)
    a = args.parse_args()
    logging.getLogger("placewatch.consumer.gateway").setLevel(logging.ERROR)  # a line a flip
    each = await cost(a.shards, a.group)
    print(f"filter cost: {each * 1e6:.1f} us a request ({a.group} deployments, {a.shards} shards)")
    with nats_server(jetstream=False) as url:
        times = await reaction(url, a.group, a.flips)
    print(
        f"status to first request routed: median {statistics.median(times) * 1e3:.2f} ms, "
        f"worst {max(times) * 1e3:.2f} ms over {a.flips} flips"
    )


if __name__ == "__main__":
    asyncio.run(main())
