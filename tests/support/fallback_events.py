"""One shard's fallback, firing then resolved, as `placewatch alerts` receives it."""

from __future__ import annotations

from datetime import UTC, datetime

from placewatch.schemas import ComputeStatus, FallbackEvent

T1 = datetime(2026, 11, 30, 6, 0, 1, 250000, tzinfo=UTC)
T2 = datetime(2026, 11, 30, 6, 7, 30, tzinfo=UTC)
T_MOVED = datetime(2026, 11, 30, 6, 3, tzinfo=UTC)
"""Between T1 and T2: the shard moved from cpu_fallback to misplaced."""


def status(
    verdict: str, when: datetime, reason: str = "", shard: str = "llama-8b-a"
) -> ComputeStatus:
    return ComputeStatus(
        node="gpu-07",
        shard=shard,
        session="d9eab6f1c983",
        time=when,
        placed_gpus=[1],
        verdict=verdict,  # type: ignore[arg-type]
        reason=reason,
    )


FIRING = FallbackEvent(
    state="firing", status=status("cpu_fallback", T1, "placed on GPU 1 but computing on the CPU")
)
MOVED = status("misplaced", T_MOVED, "placed on GPU 1 but holds 9 GiB on GPU 0")
"""A status, no event: the fallback still fires, with another verdict."""
RESOLVED = FallbackEvent(state="resolved", status=status("gpu", T2, "computes on GPU 1"))
LABELS = {
    "alertname": "PlacewatchFallback",
    "node": "gpu-07",
    "shard": "llama-8b-a",
    "verdict": "cpu_fallback",
    "severity": "critical",
}
"""The labels of FIRING's alert, which its resolved alert repeats."""
