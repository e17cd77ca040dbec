"""Real journal files for tests, written by systemd's own systemd-journal-remote.

No journald runs where the tests run, and a test never reads the host's journal: each writes
its entries, in the journal's export format, to systemd-journal-remote (Debian's
systemd-journal-remote package; .ci/run installs it), which writes a real journal file
that the worker reads with the real journalctl, pointed at the test's own folder.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from placewatch.worker.engines.evidence.journal import Journal

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
BOOT_ID = "0123456789abcdef0123456789abcdef"
UNIT = "engine.service"

needs_journal = pytest.mark.skipif(
    not Path(JOURNAL_REMOTE).exists() or shutil.which("journalctl") is None,
    reason=(
        "JOURNAL TESTS SKIPPED: no real journal can be written here: install "
        "systemd-journal-remote and journalctl (apt-get install systemd-journal-remote; "
        ".ci/run does)"
    ),
)


def entry(message: bytes | str, *, unit: str = UNIT, pid: int = 4242, at_us: int = 0) -> bytes:
    """One entry in the export format, its MESSAGE as given (size-framed where it is not one
    line of text, as journald exports it)."""
    data = message.encode() if isinstance(message, str) else message
    stamp = at_us or int(time.time() * 1e6)
    head = (
        f"__REALTIME_TIMESTAMP={stamp}\n__MONOTONIC_TIMESTAMP={stamp}\n_BOOT_ID={BOOT_ID}\n"
        f"_PID={pid}\n_SYSTEMD_UNIT={unit}\n"
    ).encode()
    if b"\n" in data or not data.isascii() or not data.decode().isprintable():
        field = b"MESSAGE\n" + struct.pack("<Q", len(data)) + data + b"\n"
    else:
        field = b"MESSAGE=" + data + b"\n"
    return head + field + b"\n"


def write(
    path: Path,
    messages: Iterable[bytes | str],
    *,
    unit: str = UNIT,
    pid: int = 4242,
    ago_s: float = 0.0,
) -> None:
    """Append one entry per message to the journal file at `path` (made when missing), the
    first stamped `ago_s` seconds ago."""
    now = int((time.time() - ago_s) * 1e6)
    data = b"".join(entry(m, unit=unit, pid=pid, at_us=now + i) for i, m in enumerate(messages))
    subprocess.run(
        [JOURNAL_REMOTE, f"--output={path}", "-"], input=data, check=True, capture_output=True
    )


def journal_in(folder: Path) -> Journal:
    """The journal in `folder` (the `journal_dir` setting), read without a gap between runs."""
    return Journal.at(str(folder), gap_s=0.0)
