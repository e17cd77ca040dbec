"""A heartbeat file: a process's own word on its health, for a container's health check.

Docker and the kubelet run a health check as a new process beside the one they check. A
new process that connects to NATS itself proves only that the server is up; what tells
whether `placewatch watch` or `placewatch alerts` still has its connection is that process,
so each writes, every few seconds, whether its own connection made a round trip with the
server (a PING the server answered) and when. The worker writes whether its tick loop
still ticks. `placewatch health --heartbeat` reads the file: no NATS, no permission, no
network, so a cluster outage never makes a fleet's liveness probes kill every worker.

A file that was not written for three of its writer's periods means the writer is stuck
or gone, whatever it last said. Depends on the standard library only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PERIODS = 3
"""A heartbeat older than this many of its writer's periods is stale (as a lease is)."""
MAX_BYTES = 4096


@dataclass(frozen=True)
class Beat:
    """What a process says of itself: whether it is healthy and why, when, and how often
    it says it."""

    pid: int
    what: str
    """Which command wrote it: `run`, `watch`, `alerts`."""
    time: float
    """When it was written (seconds since the epoch)."""
    every_s: float
    ok: bool
    why: str


def write_beat(path: str, beat: Beat) -> None:
    """Replace the file at once (a reader never sees half a beat). Blocking, and tiny."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(asdict(beat)))
    os.replace(tmp, path)


def parse_beat(text: str) -> Beat | None:
    """A Beat from the file's text; None when it is not one. Never raises."""
    try:
        raw = json.loads(text)
        beat = Beat(
            pid=int(raw["pid"]),
            what=str(raw["what"]),
            time=float(raw["time"]),
            every_s=float(raw["every_s"]),
            ok=bool(raw["ok"]),
            why=str(raw["why"]),
        )
    except (ValueError, TypeError, KeyError):
        return None
    return beat if beat.every_s > 0 else None


def judge_beat(path: str, text: str | None, now: float) -> tuple[bool, str]:
    """Healthy or not, and why in one line, from the heartbeat file's text (None: no file)."""
    if text is None:
        return False, (
            f"no heartbeat file {path}: the process has not written one yet, or was started "
            "without --health-file (PLACEWATCH_HEALTH_FILE) naming this path"
        )
    beat = parse_beat(text)
    if beat is None:
        return False, f"{path} is not a placewatch heartbeat; point --health-file at its own file"
    age = now - beat.time
    if age > PERIODS * beat.every_s:
        return False, (
            f"placewatch {beat.what} (pid {beat.pid}) last wrote {path} {age:.0f} s ago, though "
            f"it writes every {beat.every_s:g} s: it is stuck or has stopped"
        )
    return beat.ok, f"placewatch {beat.what} (pid {beat.pid}): {beat.why}"


def read_text(path: str) -> str | None:
    """The heartbeat file's text, or None when there is none to read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_BYTES)
    except OSError:
        return None


def since(moment: float | None, now: float | None = None) -> str:
    """How long ago, for a heartbeat's reason: "3 s ago", or "never"."""
    if moment is None:
        return "never"
    return f"{max((now or time.time()) - moment, 0):.0f} s ago"


def check_folder(path: str) -> str | None:
    """Why a heartbeat cannot be written at `path` (its folder missing or not writable), or
    None: said at start, not at the first failed write."""
    folder = Path(path).parent
    if not folder.is_dir():
        return f"health file {path}: the folder {folder} does not exist; create it or pick another"
    if not os.access(folder, os.W_OK):
        return f"health file {path}: the folder {folder} is not writable for this user"
    return None
