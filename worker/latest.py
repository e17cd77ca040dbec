"""What the node's micro service and its /metrics answer with: the last tick's messages.

The tick loop alone writes a `Latest`, swapping each attribute for a new immutable value (a
frozen Struct, a tuple) by one reference assignment, never changing a value it swapped in.
The micro service reads it on the event loop; /metrics reads `scraped` and `statuses` from
its server's thread (worker/metrics.py), each a whole value of one tick.
"""

from __future__ import annotations

from collections.abc import Sequence

from placewatch.schemas import ComputeStatus, NodeInventory, NodeSample, NodeTelemetry


class Latest:
    """The last tick's inventory, telemetry, sample and statuses; None or empty before it."""

    def __init__(self) -> None:
        self.inventory: NodeInventory | None = None
        self.telemetry: NodeTelemetry | None = None
        self.statuses: Sequence[ComputeStatus] = ()
        self.scraped: tuple[NodeTelemetry, NodeSample, float] | None = None
        """The last tick's telemetry and sample, and when (time.time()), for /metrics."""
