"""Text from the bus as every reader writes it out: control characters and bidirectional
marks shown as escapes, never sent on.

Node, shard and pod names, reasons and evidence lines come from whatever publishes on a
node's subjects, and reach terminals, /metrics, Alertmanager, webhooks and logs. A terminal
takes ESC and the C1 controls (CSI is U+009B) as the start of a command: a node named with
`ESC ] 0 ;` retitled the terminal that printed its /metrics, and `ESC [ 2 J` cleared it.
BEL rings, a line break makes one line two (a log line or a label that lies about what
follows), and the bidirectional overrides, isolates and marks reorder the text after them,
so that a name reads as another (Trojan Source, CVE-2021-42574). Each is shown as Python
writes it in a string: `\\x1b`, `\\n`, `\\u202e`. A backslash is left as it is: the escapes
are for a person to read, not to be read back.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""C0 controls, DEL, C1 controls; the Arabic letter mark, the left-to-right and right-to-left
marks; the line and paragraph separators; the bidirectional embeddings, overrides and
isolates (U+202A-U+202E, U+2066-U+2069)."""

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(found: re.Match[str]) -> str:
    c = found.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: str) -> str:
    """`text` with each control character and bidirectional mark shown as its escape."""
    if text.isprintable():  # the common case, and the cheap one: none of them is printable
        return text
    return UNPRINTABLE.sub(_escape, text)


def printable_values(value: Any) -> Any:
    """`value` (what a JSON document is built of: dicts, lists, strings, numbers) with every
    string in it, keys too, made printable."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_values(k): printable_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_values(v) for v in value]
    return value


MAYBE_UNPRINTABLE = re.compile(
    rb"\\[bfnrtu]|[\x00-\x1f\x7f]|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]"
)
"""How UNPRINTABLE's characters come out of msgspec's JSON encoder: C0 controls as escapes
(`\\n`, `\\u001b`), DEL raw, the others as their UTF-8 bytes; a backslash before one of
those letters in the text itself (`\\\\n`) matches too, and only costs a walk."""

_PLAIN = bytes(b for b in range(0x20, 0x100) if b not in b"\\\x7f\xc2\xd8\xe2")
"""The bytes no match of MAYBE_UNPRINTABLE starts with: JSON made of these alone (ASCII
names and numbers, the common case) is known clean by one translate, at memory speed; the
search, a hundred times slower, reads only the rest."""


def printable_json(value: Any) -> bytes:
    """`value` as JSON (msgspec's), every string in it made printable as printable_values
    makes it: the encoded bytes are searched for an unprintable character first, and the
    value walked only where one may be. `placewatch watch --once --json` at 10,000 nodes holds
    two million values: walking them all costs seconds, the check milliseconds."""
    encoded = msgspec.json.encode(value)
    if not encoded.translate(None, _PLAIN) or MAYBE_UNPRINTABLE.search(encoded) is None:
        return encoded
    return msgspec.json.encode(printable_values(value))
