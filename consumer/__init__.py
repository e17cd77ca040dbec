"""Reading placewatch from the bus, for gateways and alerting services.

Depends on the contract (placewatch.schemas) and nats-py only, never on the
worker's code, so a gateway installs no GPU or host sampling to use it.
"""

from .capacity import GpuCandidate, SharedGpu, StaleNode
from .fleet import FALLBACK_VERDICTS, FiringFallback, Fleet, FleetView, Message, ShardKey

__all__ = [
    "FALLBACK_VERDICTS",
    "FiringFallback",
    "Fleet",
    "FleetView",
    "GpuCandidate",
    "Message",
    "ShardKey",
    "SharedGpu",
    "StaleNode",
]
