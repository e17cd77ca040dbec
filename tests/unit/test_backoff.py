"""The waits between tries: doubling up to a most, and from the first again on reset."""

from __future__ import annotations

import anyio
import pytest

from placewatch.backoff import Backoff


def test_waits_double_up_to_the_most_and_reset_starts_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(anyio, "sleep", sleep)
    backoff = Backoff(1.0, 5.0)

    async def main() -> None:
        for _ in range(5):
            await backoff.wait()
        assert backoff.delay == 5.0
        backoff.reset()
        await backoff.wait()

    anyio.run(main, backend="asyncio")
    assert slept == [1.0, 2.0, 4.0, 5.0, 5.0, 1.0]


@pytest.mark.parametrize(("first", "most"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_a_backoff_that_cannot_wait_is_refused(first: float, most: float) -> None:
    with pytest.raises(ValueError, match="give 0 < first <= most"):
        Backoff(first, most)
