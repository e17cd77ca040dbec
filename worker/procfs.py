"""A /proc file read bare: one os.open and one os.read; or kept open and read again.

The /proc files a tick reads (/proc/stat, /proc/meminfo, each GPU process's /proc/PID/stat)
are a few hundred bytes to a few KiB that the kernel makes afresh on each read; pathlib and a
buffered file object cost about three times what the read itself does. A file read every
tick for the worker's life is kept open and read from its start each time, as procps' `top`
reads /proc/stat: the kernel makes it afresh all the same, and the path's lookup, the open
and the close are saved (about 40 of 100 us a file after the loop's pause).
"""

from __future__ import annotations

import os
from pathlib import Path


def read_proc(path: str | Path, limit: int = 1 << 16) -> bytes | None:
    """Up to `limit` bytes of `path`, in one read (the kernel gives a /proc file's first
    lines whole on it); None when it cannot be opened or read (a process that exited, a
    /proc without the file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


class KeptFile:
    """A file kept open and read from its start on each read(); opened at the first, and
    again after a read fails."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self, limit: int = 1 << 16) -> bytes | None:
        """Up to `limit` bytes from the file's start, in one read; None when it cannot be
        opened or read."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return None
        try:
            return os.pread(self._fd, limit, 0)
        except OSError:
            self.close()
            return None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()
