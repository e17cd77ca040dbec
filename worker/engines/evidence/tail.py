"""Following an engine's log file as it grows: the lines appended since the last look.

Reads only what was appended since the last poll, holds a partial last line
until its newline arrives, and starts over when the file is truncated or
replaced, as an engine restarted with `> log` or by logrotate leaves it: a new
inode, a smaller size, or other first bytes (ext4 and tmpfs hand a freed inode
number straight to the next file). A missing or unreadable file is no lines,
never an error: the engine may not have started yet. A file that was followed
and is deleted starts a new generation too: what it said is no longer said.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

HEAD_BYTES = 64
"""A followed file's first bytes, kept to notice a new file that reuses the old inode."""


class LogTail:
    """The lines appended to one file. `generation` counts the times it started over on
    another file: lines of an earlier generation belong to another run of the engine."""

    def __init__(
        self, path: str | Path, *, max_read: int = 4 << 20, max_line: int = 64 << 10
    ) -> None:
        self.path = Path(path)
        self.max_read = max_read
        self.max_line = max_line
        self.generation = 0
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._head = b""
        self._mtime = 0

    def poll(self) -> list[str]:
        """Complete lines appended since the last call (at most `max_read` bytes' worth)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._identity is not None:
                self.generation += 1
                self._identity, self._offset, self._partial, self._head = None, 0, b"", b""
            return []
        except OSError:
            return []
        try:
            if not stat.S_ISREG(st.st_mode):
                return []
            identity = (st.st_dev, st.st_ino)
            if identity != self._identity or st.st_size < self._offset:
                self._restart(identity)
            if st.st_size == self._offset and st.st_mtime_ns == self._mtime:
                return []
            self._mtime = st.st_mtime_ns
            with open(self.path, "rb") as f:
                if self._offset and f.read(len(self._head)) != self._head:
                    self._restart(identity)  # a new file that was given the old inode
                f.seek(self._offset)
                data = f.read(self.max_read)
        except OSError:
            return []
        if self._offset == 0:
            self._head = data[:HEAD_BYTES]
        self._offset += len(data)
        pieces = data.split(b"\n")
        pieces[0] = self._partial + pieces[0]
        self._partial = pieces.pop()[: self.max_line]
        return [p[: self.max_line].decode("utf-8", "replace").rstrip("\r") for p in pieces]

    def _restart(self, identity: tuple[int, int]) -> None:
        if self._identity is not None:
            self.generation += 1
        self._identity, self._offset, self._partial, self._head = identity, 0, b"", b""
