"""Reading placewatch from the bus, for gateways and alerting services.

Depends on the contract (placewatch.schemas), the shared package (placewatch) and nats-py,
never on the worker's code (placewatch.worker).
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
