"""Which backends a gateway should avoid, by the URL it names them with.

A gateway knows its backends by base URL (LiteLLM's `api_base`); placewatch knows shards by
node and name, and each ComputeStatus says where its shard serves (`endpoint`). `BadBackends`
joins the two once per change of the fleet, so that the question a request asks ("is this
URL a shard I should not send to?") is one dict lookup.

Several statuses may name one endpoint: a shard gone and another started on its port, or two
nodes that both publish a loopback address. The latest status (by its time) decides, so a
restarted server is served again as soon as its new shard's status says it is fine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from placewatch.schemas import ComputeStatus
from placewatch.schemas.endpoint import EndpointKey, endpoint_of, key_of
from placewatch.schemas.messages import Verdict

AVOIDED_VERDICTS: frozenset[Verdict] = frozenset({"cpu_fallback", "misplaced", "gone"})
"""What a gateway stops sending to by default: a shard computing on the CPU or on GPUs it was
not given serves at a fraction of its speed; one gone serves nothing. `partial` is kept: part
of its layers still run on its GPUs."""


@dataclass(frozen=True)
class Policy:
    """What a gateway acts on."""

    avoid: frozenset[Verdict] = AVOIDED_VERDICTS
    """The verdicts whose shards are removed from a request's candidates."""
    silent: bool = True
    """Remove the shards of a node whose telemetry stopped (its worker, or the node, is down:
    its statuses say nothing current)."""
    silent_after_s: float | None = None
    """Seconds without telemetry after which a node is silent; None: three of its intervals."""
    may_empty: bool = False
    """Leave a model group with no deployment when all are bad (the request then fails);
    False: serve them all and say so."""


@dataclass(frozen=True)
class Why:
    """Why a backend is avoided: the shard at its endpoint, and what is wrong with it."""

    node: str
    shard: str
    verdict: str
    """The shard's verdict, or `silent` for a node that stopped publishing."""
    reason: str

    def sentence(self) -> str:
        return f"shard {self.shard} on node {self.node} is {self.verdict}: {self.reason}"


@dataclass
class BadBackends:
    """The endpoints a gateway should avoid now, from the statuses a view holds."""

    policy: Policy = field(default_factory=Policy)
    _avoid: dict[EndpointKey, Why] = field(default_factory=dict)
    _keys: dict[str, EndpointKey | None] = field(default_factory=dict)
    """Each base URL asked about -> its endpoint's key (a gateway asks about a few, often)."""

    def rebuild(self, statuses: Iterable[ComputeStatus], silent: Mapping[str, float]) -> None:
        """Take the fleet as `statuses` (each shard's latest) and `silent` (each silent node ->
        seconds since its last telemetry) say it is."""
        latest: dict[EndpointKey, ComputeStatus] = {}
        for s in statuses:
            if s.endpoint is None:
                continue
            key = key_of(s.endpoint)
            held = latest.get(key)
            if held is None or s.time > held.time:
                latest[key] = s
        avoid: dict[EndpointKey, Why] = {}
        for key, s in latest.items():
            if s.verdict in self.policy.avoid:
                avoid[key] = Why(s.node, s.shard, s.verdict, s.reason)
            elif self.policy.silent and s.node in silent:
                said = f"its node sent no telemetry for {silent[s.node]:.0f} s"
                avoid[key] = Why(s.node, s.shard, "silent", said)
        self._avoid = avoid

    def why(self, base_url: str) -> Why | None:
        """Why the backend at `base_url` is avoided; None when it is not (or placewatch does not
        know it: a backend no status names is never removed)."""
        if not self._avoid:
            return None
        if base_url in self._keys:
            key = self._keys[base_url]
        else:
            endpoint = endpoint_of(base_url)
            key = None if endpoint is None else key_of(endpoint)
            if len(self._keys) < MAX_URLS:
                self._keys[base_url] = key
        return None if key is None else self._avoid.get(key)

    def __len__(self) -> int:
        return len(self._avoid)


MAX_URLS = 65_536
"""The most base URLs remembered: a gateway's own list, which a request cannot grow."""
