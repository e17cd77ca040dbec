"""Ollama's request lines: the Go durations its gin lines give a request's latency in."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.ollama.requests import go_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6.234077207s", 6.234077207), ("275.807699ms", 0.275807699), ("196.452µs", 196.452e-6),
     ("1m2.5s", 62.5), ("1h0m0s", 3600.0), ("15ns", 15e-9), ("", None), ("1.5", None),
     ("5s junk", None)],
)  # fmt: skip
def test_go_durations(text: str, seconds: float | None) -> None:
    assert go_duration(text) == (None if seconds is None else pytest.approx(seconds))
