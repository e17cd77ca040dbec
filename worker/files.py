"""Reading a small file an operator names: the config file, a shards file, credentials.

A path given by hand can name anything: a directory, a FIFO whose reader waits until someone
writes to it, `/dev/zero`, a 40 GB model file given by mistake. `read_text` opens without
blocking, refuses what is not a regular file, and reads at most its limit, so that a wrong
path is an error that says what the path names, never a worker that hangs or fills memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnusableFile(ValueError):
    """Why a file cannot be used, said after its path by the caller: "is a directory"."""


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, from its `st_mode`: "a named pipe"."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_text(path: str | Path, limit: int) -> str:
    """The UTF-8 text of the regular file `path`, at most `limit` bytes of it.

    Raises UnusableFile with what is wrong: it cannot be opened (the system's reason), it is
    not a regular file, it is larger than `limit`, it is not UTF-8.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UnusableFile(f"cannot be read ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnusableFile(f"is {kind_of(mode)}; give the path of a file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise UnusableFile(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise UnusableFile(f"is larger than {limit:,} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise UnusableFile(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
