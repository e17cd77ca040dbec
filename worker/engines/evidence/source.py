"""Which file an engine's log is, and how it may be opened.

The worker runs as root and reads files that other users' processes name, so the file it reads
is never one that the path happens to name when it looks; it is one the engine could have
written:

- `HeldLog`: the file a process holds open for writing (its stderr or stdout, llama.cpp's
  `--log-file`), as discovery found it in /proc/PID/fd. It is opened through that very
  descriptor, /proc/PID/fd/N, so what the path names later (a symbolic link to a root-only
  file, a named pipe put in its place) changes nothing; and only while /proc/PID/fdinfo/N
  says it is open for writing. A file deleted under the process is `Deleted`, never read
  again.
- `JournalLog`: the systemd journal's entries of the unit an engine runs as, whose output is a
  socket to journald (journal/ reads them).
- `PathLog`: a path no engine is known to hold (a placement's `log_path`, a container
  runtime's CRI or json-file log). It is opened without following a symbolic link in its last
  component, and read only when it is a regular file that the engine's user could read (the
  owner, group and other bits of it and of each folder above it, against the uid and groups
  of the engine's process in /proc/PID/status), or a file a runtime keeps, owned by root,
  under the runtime's own log folder. ACLs are not read: a file only an ACL opens to the
  engine's user is refused.

Every open is O_NONBLOCK (the open of a named pipe waits for a writer otherwise), O_NOCTTY
and O_CLOEXEC, and comes after a look (lstat, or stat of the held descriptor) that finds a
regular file, since opening a device can act on it (a watchdog's open arms it); what is read
is read only once fstat after the open says it is a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import TypeAlias

from ...files import kind_of
from ...procfs import read_proc

DELETED = " (deleted)"
"""What the kernel adds to the path /proc/PID/fd/N names once the file was deleted."""
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
PTRACE_ADVICE = "give the worker CAP_SYS_PTRACE (docs/operations.md, Least privilege)"
DAC_ADVICE = "give the worker CAP_DAC_READ_SEARCH (docs/operations.md, Least privilege)"


class Gone(Exception):
    """Nothing to read there now: not written yet, removed, or no longer held by its process."""


class Deleted(Gone):
    """The file was deleted while its process still holds it open: what the engine writes
    there now no path names."""


class Refused(Exception):
    """Why a log is not read, as a sentence that names its path."""


@dataclass(frozen=True)
class HeldLog:
    """The file process `pid` holds open as descriptor `fd`, named `path` in this worker's
    view; it is read while the process holds it there, open for writing."""

    path: str
    pid: int
    fd: int
    proc: str = "/proc"

    @property
    def _link(self) -> str:
        return f"{self.proc}/{self.pid}/fd/{self.fd}"

    def look(self) -> os.stat_result:
        """The held file's status, without opening it. Raises Gone, Refused."""
        try:
            held = os.readlink(self._link)
            if held == f"{self.path}{DELETED}":
                raise Deleted
            if held != self.path:
                raise Gone  # closed, replaced or renamed under the process
            st = os.stat(self._link)
        except PermissionError:
            raise Refused(
                f"this worker may not look at process {self.pid}'s open files "
                f"(/proc/{self.pid}/fd), where its log {self.path} is: {PTRACE_ADVICE}"
            ) from None
        except OSError:
            raise Gone from None  # the process exited, or closed the descriptor
        _regular(self.path, st)
        return st

    def open(self) -> tuple[int, os.stat_result]:
        """A descriptor of the held file, and its status. Raises Gone, Refused."""
        held = self.look()
        flags = _fd_flags(self.proc, self.pid, self.fd)
        if flags is None:
            raise Gone
        if flags & os.O_ACCMODE not in (os.O_WRONLY, os.O_RDWR):
            raise Refused(
                f"process {self.pid} holds {self.path} open only for reading: it is not what "
                "the engine writes, so it is not read"
            )
        fd = _open(self.path, self._link, OPEN_FLAGS)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (held.st_dev, held.st_ino) or not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Gone  # the descriptor was given another file between the look and the open
        return fd, st


@dataclass(frozen=True)
class PathLog:
    """A file named by its path: read when it is a regular file the engine's user could read,
    or a runtime's own under `runtime_dir`."""

    path: str
    pid: int | None
    """The engine's process, whose user must be able to read the file; None: none runs."""
    runtime_dir: str | None = None
    """The folder only a container runtime writes (/var/log/pods): a root-owned file there is
    the runtime's copy of the engine's output."""
    proc: str = "/proc"

    def look(self) -> os.stat_result:
        """The file's status, without following a link or opening it. Raises Gone, Refused."""
        try:
            st = os.lstat(self.path)
        except PermissionError:
            raise Refused(f"this worker may not look at {self.path}: {DAC_ADVICE}") from None
        except OSError:
            raise Gone from None
        _regular(self.path, st)
        return st

    def open(self) -> tuple[int, os.stat_result]:
        """A descriptor of the file, and its status. Raises Gone, Refused."""
        self.look()
        fd = _open(self.path, self.path, OPEN_FLAGS | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            _regular(self.path, st)
            self._allowed(fd, st)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _allowed(self, fd: int, st: os.stat_result) -> None:
        real = os.readlink(f"/proc/self/fd/{fd}")
        root = self.runtime_dir.rstrip("/") + "/" if self.runtime_dir else None
        if root is not None and real.startswith(root) and st.st_uid == 0:
            return
        if self.pid is None:
            raise Gone  # read as the engine's user, once its process runs
        who = credentials(self.proc, self.pid)
        if who is None:
            raise Gone  # the process exited
        why = who.cannot_read(real, st)
        if why is not None:
            raise Refused(f"{self.path} {why}, so it is not read")


@dataclass(frozen=True)
class JournalLog:
    """The journal entries of systemd unit `unit` (`_SYSTEMD_UNIT=`), whose process `pid`
    writes its output to journald: read through journal/, never opened as a file."""

    unit: str
    pid: int | None
    since: float | None = None
    """When that process started (seconds since the epoch): a journal first read is read from
    there, since what the unit said before is an earlier process's; None: from its newest
    entries."""
    refused: str | None = None
    """Why it is not read (a placed `journal:` naming a unit its process does not run as)."""

    @property
    def path(self) -> str:
        """The name a placement's `log_path` gives it, and that two shards share when they
        share the unit."""
        return f"{JOURNAL_PREFIX}{self.unit}"


JOURNAL_PREFIX = "journal:"
FileLog: TypeAlias = HeldLog | PathLog
"""A log that is a file (tail.py reads it)."""
LogSource: TypeAlias = HeldLog | PathLog | JournalLog


@dataclass(frozen=True)
class Credentials:
    """The ids a process's file accesses are checked with (its filesystem uid and gid, and its
    supplementary groups)."""

    uid: int
    gids: frozenset[int]

    def may(self, st: os.stat_result, bits: tuple[int, int, int]) -> bool:
        """Whether the mode bits of its class (owner, group, other, the first that applies,
        as the kernel checks them) grant one of `bits` = (user, group, other)."""
        if self.uid == 0:
            return True
        if st.st_uid == self.uid:
            return bool(st.st_mode & bits[0])
        if st.st_gid in self.gids:
            return bool(st.st_mode & bits[1])
        return bool(st.st_mode & bits[2])

    def cannot_read(self, real: str, st: os.stat_result) -> str | None:
        """Why this user could not read the file at `real`, or None when it could."""
        if not self.may(st, (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)):
            return (
                f"may not be read by the engine's user (uid {self.uid}): it is mode "
                f"{stat.S_IMODE(st.st_mode):04o}, owned by uid {st.st_uid} and gid {st.st_gid}"
            )
        folder = os.path.dirname(real)
        while True:
            try:
                above = os.stat(folder)
            except OSError:
                return f"is in {folder}, which this worker cannot look at"
            if not self.may(above, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)):
                return (
                    f"is in {folder}, which the engine's user (uid {self.uid}) may not enter "
                    f"(mode {stat.S_IMODE(above.st_mode):04o}, owned by uid {above.st_uid})"
                )
            if folder in ("/", ""):
                return None
            folder = os.path.dirname(folder)


def credentials(proc: str, pid: int) -> Credentials | None:
    """The ids of process `pid` from /proc/PID/status; None when it cannot be read."""
    data = read_proc(f"{proc}/{pid}/status")
    if data is None:
        return None
    fields = {}
    for line in data.decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = value.split()
    try:
        uid, gid = int(fields["Uid"][3]), int(fields["Gid"][3])
        groups = {int(g) for g in fields.get("Groups", [])}
    except (KeyError, IndexError, ValueError):
        return None
    return Credentials(uid, frozenset({gid, *groups}))


def _fd_flags(proc: str, pid: int, fd: int) -> int | None:
    """The open flags of a process's descriptor (/proc/PID/fdinfo/N `flags:`, in octal)."""
    data = read_proc(f"{proc}/{pid}/fdinfo/{fd}", 4096)
    if data is None:
        return None
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("flags:"):
            try:
                return int(line.split()[1], 8)
            except (IndexError, ValueError):
                return None
    return None


def _regular(path: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise Refused(
            f"{path} is a symbolic link: a log is read where it is, never where a link points"
        )
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path} is {kind_of(st.st_mode)}, not a file, so it is not read")


def _open(path: str, where: str, flags: int) -> int:
    try:
        return os.open(where, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(
                f"{path} is a symbolic link: a log is read where it is, never where a link points"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise Refused(f"this worker may not read {path}: {DAC_ADVICE}") from None
        raise Gone from None
