"""The journal's export format, as `journalctl --output=export` writes it, read into entries.

The format (systemd's docs/JOURNAL_EXPORT_FORMATS.md, as systemd 252 writes it): an entry is
its fields, one a line, ended by an empty line. A field is `NAME=value\\n` where the value is
text with no newline, else `NAME\\n`, its size as a little-endian 64-bit number, the value's
bytes and `\\n`. `__CURSOR` comes first in every entry. A MESSAGE is what the engine wrote, so
it is hostile: any bytes, of any length (journald keeps up to 768 MiB in an entry sent to its
native socket). Its size is known before its bytes are, so a huge one is cut to `max_message`
without being held whole, and no value can make another field or entry appear.

Parsing is pure and never raises: text that is not the format ends the entries there.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

_SIZE = struct.Struct("<Q")
_NAME = re.compile(rb"[A-Z0-9_]{1,64}")
"""A field's name: journald keeps upper-case letters, digits and `_`, at most 64 of them."""


@dataclass(frozen=True)
class Entry:
    """One journal entry: where it is (its cursor) and what it said."""

    cursor: str
    message: bytes
    """Its MESSAGE, at most the reader's `max_message` bytes; empty where it has none."""
    cut: bool = False
    """Its MESSAGE was longer, or the entry was not read to its end."""


@dataclass(frozen=True)
class Parsed:
    """The whole entries of some export output, and the bytes they took (where the next
    entry starts); `partial`: the entry the output ends inside of, as far as it was read."""

    entries: list[Entry]
    used: int
    partial: Entry | None = None


def parse(data: bytes, max_message: int) -> Parsed:
    """The entries `data` holds whole, and the one it ends inside of (read to its end)."""
    entries: list[Entry] = []
    at = used = 0
    while at < len(data):
        entry, end = _entry(data, at, max_message)
        if end is None:
            return Parsed(entries, used, entry)
        if entry is not None:
            entries.append(entry)
        at = used = end
    return Parsed(entries, used)


def _entry(data: bytes, at: int, max_message: int) -> tuple[Entry | None, int | None]:
    """The entry that starts at `at` and where the next one starts; None for where, with the
    entry as far as it goes, when `data` ends inside it (or stops being the format)."""
    cursor, message, cut = "", b"", False
    while True:
        newline = data.find(b"\n", at)
        if newline < 0:
            if data.startswith(b"MESSAGE=", at):  # a text MESSAGE cut by the end of `data`
                message, cut = data[at + 8 : at + 8 + max_message], True
            return _made(cursor, message, cut=True), None
        line = data[at:newline]
        if not line:
            return _made(cursor, message, cut=cut), newline + 1
        name, equals, value = line.partition(b"=")
        if not _NAME.fullmatch(name):
            return None, None  # not the format
        size = len(value)
        if equals:
            at = newline + 1
        else:
            start = newline + 1 + _SIZE.size
            if start > len(data):
                return _made(cursor, message, cut=True), None
            (size,) = _SIZE.unpack_from(data, newline + 1)
            value = data[start : start + min(size, max_message)]
            at = start + size + 1
            if at > len(data):
                if name == b"MESSAGE":
                    message = value
                return _made(cursor, message, cut=True), None
        if name == b"__CURSOR":
            cursor = value.decode("ascii", "replace")
        elif name == b"MESSAGE":
            message, cut = value[:max_message], cut or size > max_message


def _made(cursor: str, message: bytes, *, cut: bool) -> Entry | None:
    return Entry(cursor, message, cut) if cursor else None
