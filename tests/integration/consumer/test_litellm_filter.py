"""The filter inside LiteLLM's real Router: a request's candidates lose the deployment whose
shard computes on the CPU, and get it back; a group all bad is served. (The real servers and
worker are in tests/integration/engines/test_litellm_lane.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from placewatch.consumer.snapshot import FleetState
from placewatch.schemas import ComputeStatus, Endpoint
from placewatch.schemas.messages import Verdict

from tests.support.litellm_router import litellm_or_skip, router, served_by

A, B = "http://127.0.0.1:18081/v1", "http://127.0.0.1:18082/v1"


@pytest.fixture
def litellm() -> Iterator[Any]:
    module = litellm_or_skip()
    before = list(module.callbacks)
    yield module
    module.callbacks[:] = before


def put(state: FleetState, port: int, verdict: Verdict) -> None:
    state.shards["n", f"s{port}"] = ComputeStatus(
        node="n",
        shard=f"s{port}",
        session="x",
        time=datetime.now(UTC),
        verdict=verdict,
        reason="test",
        endpoint=Endpoint(host="127.0.0.1", port=port),
    )


def test_the_router_routes_around_a_cpu_fallback_and_back(litellm: Any) -> None:
    from placewatch.consumer.gateway.litellm import PlacewatchFilter

    state = FleetState()
    put(state, 18081, "gpu")
    put(state, 18082, "gpu")
    routing = PlacewatchFilter(state)
    litellm.callbacks.append(routing)
    r = router("tiny", [A, B])

    async def served(n: int) -> list[str]:
        return [
            served_by(
                await r.acompletion(
                    model="tiny", messages=[{"role": "user", "content": "hi"}], mock_response="ok"
                )
            )
            for _ in range(n)
        ]

    assert set(anyio.run(served, 20)) == {A, B}
    put(state, 18081, "cpu_fallback")
    routing.changed()
    assert set(anyio.run(served, 20)) == {B}
    put(state, 18082, "gone")
    routing.changed()
    assert set(anyio.run(served, 20)) == {A, B}  # all bad: served, and said
    put(state, 18081, "gpu")
    put(state, 18082, "gpu")
    routing.changed()
    assert set(anyio.run(served, 20)) == {A, B}
    assert routing.groups.decisions == {
        ("removed", "cpu_fallback"): 1,
        ("served all bad", "cpu_fallback"): 1,
        ("put back", ""): 1,
    }
