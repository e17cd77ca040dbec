"""Following an engine's log file as it grows: the lines appended since the last look.

Reads only what was appended since the last poll, a chunk at a time, holds a partial last
line until its newline arrives, and starts over when the file is truncated or replaced, as
an engine restarted with `> log` or by logrotate leaves it: a new inode, a smaller size, or
other first bytes (ext4 and tmpfs hand a freed inode number straight to the next file). A
file that was followed and is gone starts a new generation too: what it said is no longer
said (`deleted` tells a file deleted under its process). Which file is read, and how it is
opened, is its source's (source.py): a file it may not read is no lines, and `refused` says
why.

A file larger than `from_end` when it is first followed is read from its newest process life
(the `start` it is given finds it in its last `from_end` bytes), not from its first byte: at
one chunk a poll, a 50 GiB log would take most of an hour to reach its newest line.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .source import Deleted, FileLog, Gone, Refused

HEAD_BYTES = 64
"""A followed file's first bytes, kept to notice a new file that reuses the old inode."""
CHUNK = 64 << 10
"""The bytes one poll reads by default: a reader checks its deadline between chunks."""
FROM_END = 4 << 20
"""How far back from its end a large log is searched for its newest life when first read."""

Start = Callable[[bytes], int | None]
"""Where to start in a log's last bytes (an offset into them, at a line's start), or None."""


class LogTail:
    """The lines appended to one file. `generation` counts the times it started over on
    another file: lines of an earlier generation belong to another run of the engine."""

    def __init__(
        self,
        source: FileLog,
        *,
        max_line: int = 64 << 10,
        from_end: int = FROM_END,
        start: Start | None = None,
    ) -> None:
        self.source = source
        self.max_line = max_line
        self.from_end = from_end
        self.start = start
        self.generation = 0
        self.refused: str | None = None
        """Why the file is not read now (source.py), or None."""
        self.behind = 0
        """Bytes the file held past what was read, when it was last looked at."""
        self.last_read = 0
        """Bytes the last poll read."""
        self.deleted = False
        """The file was deleted while its process holds it (source.Deleted): nothing is read
        until another file is there."""
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

    def poll(self, limit: int = CHUNK, stop_at: float | None = None) -> list[str]:
        """Complete lines appended since the last call (at most `limit` bytes' worth). A file
        read waits for nothing, so `stop_at` (a journal's bound, journal/) is not needed."""
        self.last_read = 0
        try:
            st = self.source.look()
            if self._unchanged(st):
                self.refused, self.behind = None, 0
                return []
            fd, st = self.source.open()
        except Gone as why:
            self.refused, self.deleted = None, isinstance(why, Deleted)
            self._gone()
            return []
        except Refused as why:
            self.refused = str(why)
            return []
        except OSError:
            return []
        self.refused, self.deleted = None, False
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
            if self._offset == 0 and st.st_size > self.from_end:
                self._offset = self._newest(fd, st.st_size)
        data = os.pread(fd, limit, self._offset)
        self._offset += len(data)
        self.last_read = len(data)
        self.behind = max(st.st_size - self._offset, 0)
        return data

    def _newest(self, fd: int, size: int) -> int:
        """Where to start reading a large file: its newest life in its last bytes, else the
        first whole line there."""
        at = size - self.from_end
        window = os.pread(fd, self.from_end, at)
        found = self.start(window) if self.start is not None else None
        if found is None:
            newline = window.find(b"\n")
            found = newline + 1 if newline >= 0 else len(window)
        return at + found

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
