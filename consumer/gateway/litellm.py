"""LiteLLM's Router, told by placewatch which deployments not to send a request to.

LiteLLM picks a deployment of a model group through a chain of filters, then a strategy
(docs.litellm.ai, router "How a deployment is picked"). A `CustomLogger` in
`litellm.callbacks` that overrides `async_filter_deployments` is one link of that chain: it
gets each request's remaining candidates and returns those that may serve it, before the
strategy, on every attempt (a retry picks again), in the Router and in the proxy alike. That
is the hook for a verdict that changes while a server still answers its health check:
LiteLLM's own health check filter (`enable_health_check_routing`) only knows whether a
deployment answers, and its cooldowns act only after requests failed. Checked against
litellm 1.110.2, whose Rust core runs such callbacks in its `callback_filters` stage.

The filter reads the fleet from a FleetView in the gateway's own process: no request waits
on NATS. The view tells it when a status changes; node silence is looked at again every
`recheck_s`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from nats.aio.client import Client

from placewatch.schemas import subjects

from ..fleet import FleetView
from ..snapshot import FleetState
from .backends import BadBackends, Policy
from .decisions import GroupFilter

RECHECK_S = 1.0
"""How often silence is looked at again while no status changes (a node goes silent by
saying nothing)."""

Deployment = dict[str, Any]
"""A deployment as LiteLLM hands it to a filter: its model_list entry."""


class PlacewatchFilter(CustomLogger):  # type: ignore[misc]  # litellm's types are not followed
    """Removes from each request's candidates the deployments whose shard placewatch says is
    not computing where it was placed (`policy`), matched by `api_base` to the endpoint
    its status gives."""

    def __init__(
        self,
        view: FleetState,
        policy: Policy | None = None,
        *,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
        followed: FleetView | None = None,
    ) -> None:
        super().__init__()
        self.view = view
        self.backends = BadBackends(policy or Policy())
        self.groups: GroupFilter[Deployment] = GroupFilter(self.backends, api_base, ident)
        self.recheck_s = recheck_s
        self.clock = clock
        self._dirty = True
        self._built = -math.inf
        self._followed = followed
        """The view `follow` started for it, which `stop` stops."""

    async def stop(self) -> None:
        """Stop the view `follow` started (a view given to it is its owner's to stop)."""
        if self._followed is not None:
            await self._followed.stop()

    def changed(self, message: object = None) -> None:
        """The view took a message: rebuild before the next request (FleetView's on_change)."""
        self._dirty = True

    async def async_filter_deployments(
        self,
        model: str,
        healthy_deployments: list[Deployment],
        messages: object,
        request_kwargs: Mapping[str, object] | None = None,
        parent_otel_span: object = None,
    ) -> list[Deployment]:
        """LiteLLM's hook: the candidates of a request to model group `model` to keep."""
        self.refresh()
        return self.groups.filter(model, healthy_deployments)

    def refresh(self) -> None:
        """Rebuild what to avoid when the view changed, or silence may have."""
        now = self.clock()
        if not self._dirty and now - self._built < self.recheck_s:
            return
        self._dirty, self._built = False, now
        policy = self.backends.policy
        silent = {s.node: s.age_s for s in self.view.stale(policy.silent_after_s)}
        self.backends.rebuild(list(self.view.shards.values()), silent)


async def follow(
    nc: Client,
    prefix: str = subjects.DEFAULT_PREFIX,
    policy: Policy | None = None,
) -> PlacewatchFilter:
    """A filter over a FleetView of its own, started (the fleet as the bus keeps it, then
    live). Register it with `litellm.callbacks.append(...)`; `stop()` it at the end."""
    view = FleetView(nc, prefix)
    routing = PlacewatchFilter(view, policy, followed=view)
    view.on_change = routing.changed
    await view.start()
    routing.changed()
    return routing


def api_base(d: Deployment) -> str | None:
    params = d.get("litellm_params")
    url = params.get("api_base") if isinstance(params, dict) else None
    return url if isinstance(url, str) else None


def ident(d: Deployment) -> str:
    info = d.get("model_info")
    found = info.get("id") if isinstance(info, dict) else None
    return str(found) if found is not None else str(api_base(d))
