"""Waits between tries that double each time, up to a most, and start again when asked.

What retries until a server or an endpoint takes it (following the placements bucket, a
webhook's delivery, an acknowledgement) waits this way: a quick second try for a blip, and
no hammering of something that stays down.
"""

from __future__ import annotations

import anyio


class Backoff:
    """`delay` is the next wait: `first`, then twice the one before, never over `most`."""

    def __init__(self, first: float, most: float) -> None:
        if not 0 < first <= most:
            raise ValueError(f"a backoff from {first:g} s to {most:g} s: give 0 < first <= most")
        self.first, self.most = first, most
        self.delay = first

    async def wait(self) -> None:
        """Sleep the next wait, and make the one after it longer."""
        delay, self.delay = self.delay, min(self.delay * 2, self.most)
        await anyio.sleep(delay)

    def reset(self) -> None:
        """The next wait is `first` again (what failed had been working meanwhile)."""
        self.delay = self.first
