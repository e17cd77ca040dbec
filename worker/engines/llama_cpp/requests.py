"""llama-server's request lines: a request starts on a slot and ends on it.

At its default verbosity llama-server prints, per request (b11434, 2026-11):

    0.03.049.435 I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0
    0.03.053.685 I slot print_timing: id  3 | task 0 |   total time =   4.17 ms /  34 tokens
    0.03.053.926 I slot      release: id  3 | task 0 | stop processing: n_tokens = 33, truncated = 0

(some spaces taken out here; builds of 2024 and 2025 print the same words without the time
prefix). Builds of early 2024 and forks such as ik_llama.cpp print `slot is processing task |
... id_slot=0` and `slot released | ... id_slot=0` (and the same keys in JSON with
`--log-format json`). A request ends at its `print_timing` line, with the engine's own total
time, or at its `release` line, whichever is read first.
"""

from __future__ import annotations

import re

from ..base import RequestLine

_SLOT = re.compile(r"\b(launch_slot_|print_timing|release):\s+id\s+(\d+)\s+\|\s+task\s+-?\d+\s+\|")
_TOTAL = re.compile(r"total time\s*=\s*(\d{1,12}(?:\.\d{1,9})?)\s*ms")
_KEYED = re.compile(r"slot (is processing task|released)\b.*?\bid_slot\"?\s*[=:]\s*(\d+)")


def read_request(line: str) -> RequestLine | None:
    """What a llama-server line says of a request on one of its slots; None for any other."""
    slot = _SLOT.search(line)
    if slot is not None:
        what, number = slot[1], int(slot[2])
        if what == "launch_slot_" and "processing task" in line:
            return RequestLine("start", number)
        if what == "print_timing":
            total = _TOTAL.search(line, slot.end())
            return None if total is None else RequestLine("end", number, float(total[1]) / 1000)
        if what == "release" and "stop processing" in line:
            return RequestLine("end", number)
        return None
    keyed = _KEYED.search(line)
    if keyed is None:
        return None
    return RequestLine("end" if keyed[1] == "released" else "start", int(keyed[2]))


class _Requests:
    word = "slot"

    def read(self, line: str) -> RequestLine | None:
        return read_request(line)


REQUESTS = _Requests()
