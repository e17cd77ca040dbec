"""Every spelling of "no reading" is None; a reading never is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from placewatch.gpu import values

WORDS = [
    "N/A",
    "[N/A]",
    "[Not Supported]",
    "Not Supported",
    "[Insufficient Permissions]",
    "[Requested functionality has been deprecated]",
    "Requested functionality has been deprecated",
    "Unknown Error",
    "unknown",
    "none",
    "NA",
    "N/A (Secondary die)",
    "",
    "  ",
]


def reference(value: str) -> bool:
    """The rule as the module's docstring states it, without its shortcuts."""
    text = value.strip()
    return (
        not text
        or (text[0] == "[" and text[-1] == "]")
        or text[:5].upper() == "N/A ("
        or text.upper()
        in {
            "N/A",
            "NA",
            "NONE",
            "UNKNOWN",
            "NOT SUPPORTED",
            "UNKNOWN ERROR",
            "REQUESTED FUNCTIONALITY HAS BEEN DEPRECATED",
        }
    )


def test_every_spelling_of_no_reading_is_missing() -> None:
    for word in WORDS:
        assert values.is_missing(word), word
        assert values.number(word) is None, word


def test_readings_are_not_missing() -> None:
    for reading in ["0", "81559", "433.78 W", "GPU-3f6c1a52", "NVIDIA H100", "Unified", "Nvidia"]:
        assert not values.is_missing(reading), reading


@given(st.text(max_size=50) | st.sampled_from(WORDS).map(lambda w: f"  {w.lower()} "))
def test_is_missing_follows_the_stated_rule(value: str) -> None:
    assert values.is_missing(value) == reference(value)
