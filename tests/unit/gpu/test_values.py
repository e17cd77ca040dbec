"""Every spelling of "no reading" is None; a reading never is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.gpu import values

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


def test_a_drivers_integer_is_whole_from_0_to_2_to_the_63_minus_1() -> None:
    """What NVML's bindings hand over: ints, a u64's -1 among them."""
    assert values.whole(0) == 0
    assert values.whole((1 << 63) - 1) == (1 << 63) - 1
    assert [values.whole(v) for v in [1 << 63, (1 << 64) - 1, -1, True, 1.5, "7", None]] == [
        None
    ] * 7


def test_numbers_past_64_bits_are_no_reading() -> None:
    """A u64's -1 (18446744073709551615) is how some tools say "none"; a pid of 1e23 is
    garbage. Either would not fit MessagePack's integers nor a consumer's int64."""
    assert values.to_bytes("18446744073709551615") is None  # MiB: 2**84 bytes
    assert values.to_bytes("1e300 MiB") is None
    assert values.to_bytes("8796093022207 MiB") == 8796093022207 << 20  # just under 2**63
    assert values.to_bytes("8796093022208 MiB") is None  # 2**63 bytes
    assert values.integer("99999999999999999999999") is None
    assert values.integer("-1e19") is None
    assert values.integer("1e18") == 10**18
    assert values.integer("4194304") == 4194304
