"""A /proc file read bare: one os.open and one os.read.

Each GPU process's /proc/PID/stat is a few hundred bytes that the kernel makes afresh on
each read; pathlib and a buffered file object cost about three times what the read itself
does, and psutil.Process more again. Attribution reads it for every process a GPU lists
and its ancestors (shards/attribution.py).
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
