"""Which journal files are read, by which journalctl, and why none can be.

journald keeps a persistent journal in /var/log/journal/<machine id>/ and a volatile one in
/run/log/journal/<machine id>/ (Storage=auto: the first where the folder exists). The files
are listed here and each is given to journalctl with `--file`: inside a container the
machine id is the container's, so journalctl's own choice (the local machine's folder)
would read none of the node's; and a folder's `remote/` (systemd-journal-remote's, other
machines' entries) is not this node's, so only a folder's own files and those of a machine
id's folder are read. The listing, with each file's size and time, is also what tells that
the journal changed since it was last read, without running journalctl.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass

SYSTEM_FOLDERS = ("/var/log/journal", "/run/log/journal")
GAP_S = 1.0
"""The least time between two runs of journalctl for one unit that left nothing behind:
journald writes its files for every unit on the node, and a run costs a process's start."""
MAX_FILES = 2048
"""The most journal files read (the newest): journald keeps a few hundred at most."""
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")
MOUNT_ADVICE = (
    "mount /var/log/journal and /run/log/journal into the worker read-only "
    "(deploy/kubernetes/placewatch.yaml and compose/docker-compose.yml do), "
    "or set journal_dir (docs/configuration.md)"
)
GROUP_ADVICE = (
    "run the worker as root or in the systemd-journal group (deploy/systemd/placewatch.service: "
    "SupplementaryGroups=systemd-journal)"
)
INSTALL_ADVICE = (
    "install journalctl where the worker runs (Debian and Ubuntu: the systemd package; "
    "compose/Dockerfile installs it)"
)

FileState = tuple[str, int, int, int, int]
"""A journal file's path, device, inode, size and modification time (ns)."""


@dataclass(frozen=True)
class Listing:
    """The journal files found, or why there are none to read."""

    files: tuple[FileState, ...] = ()
    problem: str | None = None

    @property
    def inodes(self) -> frozenset[tuple[int, int]]:
        return frozenset((f[1], f[2]) for f in self.files)


@dataclass(frozen=True)
class Journal:
    """Where the journal is read from: `folders` (the node's journal unless a setting names
    one) through the journalctl at `journalctl` (None: there is none)."""

    folders: tuple[str, ...] = SYSTEM_FOLDERS
    journalctl: str | None = None
    gap_s: float = GAP_S

    @classmethod
    def at(cls, folder: str | None = None, gap_s: float = GAP_S) -> Journal:
        """The journal in `folder` (the `journal_dir` setting), else the node's, read with the
        journalctl on PATH."""
        return cls((folder,) if folder else SYSTEM_FOLDERS, shutil.which("journalctl"), gap_s)

    def listing(self) -> Listing:
        """The journal files to read, newest last; or, with none, why (and how to fix it)."""
        if self.journalctl is None:
            return Listing(problem=f"journalctl is not installed: {INSTALL_ADVICE}")
        found: list[FileState] = []
        refused: list[str] = []
        folders = [f for f in self.folders if os.path.isdir(f)]
        for folder in folders:
            for inner in _inner(folder):
                found += _files(inner, refused)
        if found:
            found.sort(key=lambda f: f[4])
            return Listing(tuple(found[-MAX_FILES:]))
        where = " or ".join(self.folders)
        if refused:
            return Listing(
                problem=f"this worker may not read the journal in {refused[0]}: {GROUP_ADVICE}"
            )
        if not folders:
            return Listing(problem=f"no journal is in this worker's view ({where}): {MOUNT_ADVICE}")
        return Listing(problem=f"no journal files in {where}: {MOUNT_ADVICE}")


def _inner(folder: str) -> list[str]:
    """The folder, and its machine ids' folders."""
    try:
        names = os.listdir(folder)
    except OSError:
        return [folder]
    return [folder, *(os.path.join(folder, n) for n in sorted(names) if _MACHINE_ID.fullmatch(n))]


def _files(folder: str, refused: list[str]) -> list[FileState]:
    """The journal files in one folder (`*.journal`: journald's names a file it found
    damaged `.journal~` and reads it no more); a folder or file this worker may not read is
    added to `refused`."""
    try:
        names = os.listdir(folder)
    except PermissionError:
        refused.append(folder)
        return []
    except OSError:
        return []
    found = []
    for name in names:
        if not name.endswith(".journal"):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue  # vacuumed since the listing
        if not stat.S_ISREG(st.st_mode):
            continue
        if not os.access(path, os.R_OK):
            refused.append(path)
            continue
        found.append((path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return found
