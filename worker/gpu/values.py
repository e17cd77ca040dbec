"""Reading the values GPU tools print, where "no reading" is never 0.

nvidia-smi, rocm-smi and amd-smi say a value is missing in many spellings,
changing with driver versions: `[N/A]`, `N/A`, `[Not Supported]`,
`[Insufficient Permissions]`, `[Requested functionality has been deprecated]`
(R570+ for some power fields), `[Function Not Found]` (Windows drivers), or
an empty cell. `nvidia-smi -q -x` prints the same words without brackets
(`Requested functionality has been deprecated` on R570+ drivers, `Unknown
Error`). All of them are None, and none of them drops the rest of a row.
"""

from __future__ import annotations

import math
import re

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)\s*$")
_NUMBER_START = frozenset("+-.0123456789")

_BYTES_PER_UNIT = {
    "b": 1,
    "kib": 1 << 10,
    "kb": 1 << 10,
    "mib": 1 << 20,
    "mb": 1 << 20,
    "gib": 1 << 30,
    "gb": 1 << 30,
}


_MISSING_WORDS = frozenset(
    {
        "N/A",
        "NA",
        "NONE",
        "UNKNOWN",
        "NOT SUPPORTED",
        "UNKNOWN ERROR",
        "REQUESTED FUNCTIONALITY HAS BEEN DEPRECATED",
    }
)
_LONGEST_WORD = max(len(w) for w in _MISSING_WORDS)
_FIRST_LETTERS = frozenset(w[0] for w in _MISSING_WORDS)  # N, U, R; "N/A (" too


def is_missing(value: object) -> bool:
    """True for every spelling of "no reading" and for None."""
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    text = value.strip()
    if not text:
        return True
    if text[0].isdigit():
        return False  # the common case, a reading
    if text[0] == "[" and text[-1] == "]":
        return True
    if text[0].upper()[:1] not in _FIRST_LETTERS:
        return False  # the common case, a reading: every word below starts with N, U or R
    if text[:5].upper() == "N/A (":
        return True  # rocm-smi 6.0 on an RX 6700 XT: "N/A (Secondary die)"
    return len(text) <= _LONGEST_WORD and text.upper() in _MISSING_WORDS


def _parse(text: str) -> tuple[float, str] | None:
    """A number and the unit written after it ("433.78 W" -> (433.78, "W"))."""
    try:
        return float(text), ""  # the common case: a bare number, as nounits prints it
    except ValueError:
        pass
    if text.lstrip()[:1] not in _NUMBER_START:
        return None  # "[N/A]", "Disabled": no number, said without the pattern
    match = _NUMBER.match(text)
    if match is None:
        return None
    return float(match.group(1)), match.group(2)


def number(value: object) -> float | None:
    """A finite number from `value` ("433.78 W", "9 %", 81559, "[N/A]" -> None)."""
    if isinstance(value, str):  # the common case first: a cell as a tool printed it
        parsed = _parse(value)
        if parsed is None:
            return None
        result = parsed[0]
    elif isinstance(value, bool):
        return None
    elif isinstance(value, int | float):
        result = float(value)
    else:
        return None
    return result if math.isfinite(result) else None


_BEYOND_64_BITS = 2.0**63
"""No pid, index, count or size a tool reads reaches 2**63: a larger number is a sentinel
(18446744073709551615, a u64's -1) or garbage, and would not fit the 64-bit integers of
MessagePack and of the consumers' languages."""


def integer(value: object) -> int | None:
    """A whole number from `value`; None when missing or past a signed 64-bit integer."""
    result = number(value)
    if result is None or not -_BEYOND_64_BITS < result < _BEYOND_64_BITS:
        return None
    return round(result)


def to_bytes(value: object, unit: str = "MiB") -> int | None:
    """Bytes from a size in `unit`, or in the unit the value itself names ("2296 MiB")."""
    if isinstance(value, str):
        parsed = _parse(value)
        if parsed is None:
            return None
        amount, written = parsed
        unit = written or unit
    else:
        amount_or_none = number(value)
        if amount_or_none is None:
            return None
        amount = amount_or_none
    scale = _BYTES_PER_UNIT.get(unit.lower())
    if scale is None or not amount >= 0:  # also rejects NaN
        return None
    size = amount * scale
    return round(size) if size < _BEYOND_64_BITS else None  # "1e308 GiB" is no reading


def percent(value: object) -> float | None:
    """A percentage in [0, 100], or None when out of range or missing."""
    result = number(value)
    if result is None or not 0 <= result <= 100:
        return None
    return result


def text(value: object) -> str | None:
    """A string reading, None when missing."""
    if not isinstance(value, str) or is_missing(value):
        return None
    return value.strip()


_LARGEST_COUNT = (1 << 63) - 1


def count(value: object) -> int | None:
    """A whole count or clock from `value` ("3", "1980 MHz", "16x"); None when it is
    negative, missing, or past what a 64-bit counter holds."""
    result = number(value)
    if result is None or not 0 <= result <= _LARGEST_COUNT:
        return None
    whole = round(result)
    return whole if whole <= _LARGEST_COUNT else None


def whole(value: object) -> int | None:
    """An integer a driver's library handed over (NVML's u32 and u64): None unless it is an
    int from 0 to 2**63 - 1. A u64's -1 (18446744073709551615) is how a driver says "no
    reading" where it gives no error, and would read as 16 EiB of free memory."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= _LARGEST_COUNT else None


def flag(value: object) -> bool | None:
    """A yes/no reading as nvidia-smi prints it ("Yes", "No"); None for anything else."""
    if not isinstance(value, str):
        return None
    return {"yes": True, "no": False}.get(value.strip().lower())
