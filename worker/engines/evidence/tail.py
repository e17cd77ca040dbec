"""Following an engine's log file as it grows: the lines appended since the last look.

Reads only what was appended since the last poll, a chunk at a time, holds a partial last
line until its newline arrives, and starts over when the file is truncated or replaced, as
an engine restarted with `> log` or by logrotate leaves it: a new inode, a smaller size, or
other first bytes (ext4 and tmpfs hand a freed inode number straight to the next file). A
file that was followed and is gone starts a new generation too: what it said is no longer
said. Which file is read, and how it is opened, is its source's (source.py): a file it may
not read is no lines, and `refused` says why.
"""

from __future__ import annotations

import os

from .source import Gone, LogSource, Refused

HEAD_BYTES = 64
"""A followed file's first bytes, kept to notice a new file that reuses the old inode."""
CHUNK = 64 << 10
"""The bytes one poll reads by default: a reader checks its deadline between chunks."""


class LogTail:
    """The lines appended to one file. `generation` counts the times it started over on
    another file: lines of an earlier generation belong to another run of the engine."""

    def __init__(
        self,
        source: LogSource,
        *,
        max_line: int = 64 << 10,
    ) -> None:
        self.source = source
        self.max_line = max_line
        self.generation = 0
        self.refused: str | None = None
        """Why the file is not read now (source.py), or None."""
        self.behind = 0
        """Bytes the file held past what was read, when it was last looked at."""
        self.last_read = 0
        """Bytes the last poll read."""
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._head = b""
        self._mtime = 0

    @property
    def path(self) -> str:
        return self.source.path

    @property
    def offset(self) -> int:
        """Where in the file the next read starts."""
        return self._offset

    def poll(self, limit: int = CHUNK) -> list[str]:
        """Complete lines appended since the last call (at most `limit` bytes' worth)."""
        self.last_read = 0
        try:
            st = self.source.look()
            if self._unchanged(st):
                self.refused, self.behind = None, 0
                return []
            fd, st = self.source.open()
        except Gone:
            self.refused = None
            self._gone()
            return []
        except Refused as why:
            self.refused = str(why)
            return []
        except OSError:
            return []
        self.refused = None
        try:
            data = self._read(fd, st, limit)
        except OSError:
            return []
        finally:
            os.close(fd)
        return self._lines(data)

    def _unchanged(self, st: os.stat_result) -> bool:
        return (
            (st.st_dev, st.st_ino) == self._identity
            and st.st_size == self._offset
            and st.st_mtime_ns == self._mtime
        )

    def _read(self, fd: int, st: os.stat_result, limit: int) -> bytes:
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity or st.st_size < self._offset:
            self._restart(identity)
        self._mtime = st.st_mtime_ns
        if self._head and os.pread(fd, len(self._head), 0) != self._head:
            self._restart(identity)  # a new file that was given the old inode
        if not self._head:
            self._head = os.pread(fd, HEAD_BYTES, 0)
        data = os.pread(fd, limit, self._offset)
        self._offset += len(data)
        self.last_read = len(data)
        self.behind = max(st.st_size - self._offset, 0)
        return data

    def _lines(self, data: bytes) -> list[str]:
        pieces = data.split(b"\n")
        pieces[0] = self._partial + pieces[0]
        self._partial = pieces.pop()[: self.max_line]
        return [p[: self.max_line].decode("utf-8", "replace").rstrip("\r") for p in pieces]

    def _gone(self) -> None:
        if self._identity is not None:
            self.generation += 1
        self._identity, self._offset, self._partial, self._head = None, 0, b"", b""
        self.behind = 0

    def _restart(self, identity: tuple[int, int]) -> None:
        if self._identity is not None:
            self.generation += 1
        self._identity, self._offset, self._partial, self._head = identity, 0, b"", b""
