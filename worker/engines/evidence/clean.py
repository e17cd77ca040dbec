"""An engine's line as it said it: without the colour codes and the prefixes that posters,
journald, docker and the engines' own log formats put before it.

Which prefixes an engine puts before its lines is its own (its folder's log module); those
that come from where the line was kept (journald, docker compose, a paste) are here. The
prefixes are taken off one after another, up to eight, because they stack: journald's
`Apr 18 19:28:59 host ollama[1170]:` comes before Ollama's own `time=...`, then its
`level=INFO source=server.go:368`; llama.cpp's `0.00.004.496 I` before its module tag
`cmn  common_param:`.
"""

from __future__ import annotations

import re

from .. import ENGINES

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_AROUND = (
    r">\s?",  # quoted in an issue or a mail
    r"\*\*",  # markdown bold around a pasted line
    r"│\s*",  # a pager's box border (k9s)
    # journald: "Apr 18 19:28:59 host ollama[1170]:" (the host may be missing or hold spaces)
    r"[A-Za-z]{3}\s+\d{1,2}\s+\d\d:\d\d:\d\d\s+(?:[^\[\]\s][^\[\]]{0,63}?\s+)?"
    r"[\w.@/-]{1,64}\[\d{1,10}\]:",
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?(?=\s)",
    r"\d\d:\d\d:\d\d(?:\.\d{1,9})?(?=\s)",  # a time of day alone
    r"[\w.-]{1,64}-\d{1,4}\s+\|(?=\s)",  # docker compose: "llama-1  | "
)
"""What is put before any engine's line; each engine adds its own (its folder's log)."""
_PREFIX = re.compile(
    r"\s*(?:" + "|".join([*_AROUND, *(p for e in ENGINES for p in e.log().prefixes)]) + ")"
)
_MAX_PREFIXES = 8
_CONTROLS = str.maketrans({c: " " for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]})
"""C0 and C1 control characters (a tab included), each made a space."""


def clean_line(line: str) -> str:
    """The line without colour codes, other control characters, timestamps and the prefixes
    put before it. What is left may become a status's reason or evidence, shown in terminals
    and logs: an escape sequence a log line holds must not reach them."""
    text = _ANSI.sub("", line) if "\x1b" in line else line
    if not text.isprintable():
        text = text.translate(_CONTROLS)
    for _ in range(_MAX_PREFIXES):
        match = _PREFIX.match(text)
        if match is None or match.end() == 0:
            break
        text = text[match.end() :]
    text = text.strip()
    return text[:-2].rstrip() if text.endswith("**") else text
