"""LiteLLM's real Router in front of two real llama-servers that a real `placewatch run`
judges: one shard turns `cpu_fallback`, every request from then on goes to the other, and
traffic comes back when it resolves.

The worker's stand-in nvidia-smi (tests/support/engine_lane.py) first lists both servers
holding memory on GPU 0, where the shards file places them (`gpu`); then lists only the
second, so the first, placed on GPU 0, holds nothing there (`cpu_fallback`, as a CUDA build
whose backend failed to load looks to the GPU tool); then both again (`gpu`, resolved). The
servers answer every request throughout, as a shard on the CPU does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import nats
import pytest

from placewatch.consumer.gateway.litellm import PlacewatchFilter, follow
from placewatch.schemas.messages import Verdict

from tests.support.engine_lane import Lane, Running, Server
from tests.support.eventually import eventually_async
from tests.support.litellm_router import litellm_or_skip, router, served_by

REQUESTS = 16
"""Requests a phase sends: both servers are picked among 16 (a shuffle leaves one out once in
2^15 runs)."""


@pytest.fixture
def litellm() -> Iterator[Any]:
    module = litellm_or_skip()
    before = list(module.callbacks)
    yield module
    module.callbacks[:] = before


def base(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}/v1"


async def served(r: Any, n: int = REQUESTS) -> list[str]:
    """Where each of `n` real chat requests was served."""
    found = []
    for _ in range(n):
        response = await r.acompletion(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        found.append(served_by(response))
    return found


def verdict_of(routing: PlacewatchFilter, shard: str) -> Verdict | None:
    s = routing.view.status("gpu", shard)
    return None if s is None else s.verdict


def test_litellm_routes_around_a_shard_on_the_cpu_and_back(lane: Lane, litellm: Any) -> None:
    a, b = lane.start(), lane.start()
    shards = lane.shards_file({"a": a, "b": b})
    lane.gpu_lists([a.engine_pid, b.engine_pid])
    worker = Running(lane.nats.url, "gpu", shards, lane.fake_gpu.env(), lane.tmp / "gpu.log")
    try:
        anyio.run(_phases, lane, a, b, litellm)
    except BaseException:
        print(worker.said())
        raise
    finally:
        worker.stop()


async def _phases(lane: Lane, a: Server, b: Server, litellm: Any) -> None:
    nc = await nats.connect(lane.nats.url)
    routing = await follow(nc)
    litellm.callbacks.append(routing)
    r = router("tiny", [base(a), base(b)])
    try:
        await eventually_async(
            lambda: verdict_of(routing, "a") == verdict_of(routing, "b") == "gpu",
            30,
            what="both shards gpu",
        )
        assert set(await served(r)) == {base(a), base(b)}

        lane.gpu_lists([b.engine_pid])  # a holds nothing on GPU 0 from the next read on
        await eventually_async(lambda: verdict_of(routing, "a") == "cpu_fallback", 30)
        assert set(await served(r)) == {base(b)}
        status = routing.view.status("gpu", "a")
        assert status is not None and status.endpoint is not None
        assert status.endpoint.url() == f"http://127.0.0.1:{a.port}"

        lane.gpu_lists([a.engine_pid, b.engine_pid])
        await eventually_async(lambda: verdict_of(routing, "a") == "gpu", 30)
        assert set(await served(r)) == {base(a), base(b)}
        assert routing.groups.decisions == {("removed", "cpu_fallback"): 1, ("put back", ""): 1}
    finally:
        await routing.stop()
        await nc.close()
