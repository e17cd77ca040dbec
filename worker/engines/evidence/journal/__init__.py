"""An engine's output kept by the systemd journal, read as its log.

An engine run as a systemd service (Ollama's Linux install makes `ollama.service`) writes to a
socket that journald reads, and journald keeps the lines under the unit's name. They are read
with journalctl, run as a subprocess with `--output=export` (systemd 252 and later), not with
a library bound into the worker (python-systemd's sd_journal):

- a run is bounded: a time limit and a byte cap, then journalctl is killed (run.py). A call
  into libsystemd from the reading thread can be neither timed out nor cancelled, and a
  journal file being vacuumed under its mmap can end the process that maps it with SIGBUS;
- the export format frames a value that is not one line of text by its size (export.py), so
  any bytes a MESSAGE holds are read as they are, and a huge one is cut without being held;
  journalctl's JSON turns a non-UTF-8 MESSAGE into a list of numbers and one over 4 KiB into
  null;
- journalctl is on every systemd node; the worker's image installs it (compose/Dockerfile).

units.py names the unit from a process's cgroup, folders.py lists the journal's files (the
node's, or the `journal_dir` setting's) and says why none can be read, tail.py follows one
unit's entries with a file's rules.
"""

from .folders import Journal
from .tail import JournalTail
from .units import unit_of, valid_unit

__all__ = ["Journal", "JournalTail", "unit_of", "valid_unit"]
