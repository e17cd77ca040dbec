"""The shards file's placements, each with the process the worker would judge as it.

Doctor takes the worker's settings, `--shards` and `--no-discover` among them: the engines it
asks for their GPUs are the file's and, unless discovery is off, those it finds. A placement's
process is found as the worker finds it (liveness.py): by `pid`, or as the oldest process
whose command line its `match` finds, which reads the command lines of the node's processes
only for a placement that has a `match`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from placewatch.schemas import PlacementSpec

from ..shards.attribution import ProcTable
from ..shards.liveness import Tracked, find_processes, named, shared_processes
from ..shards.placements import Placement, parse_shards_file
from ..shards.scope import EVERY, ProcessScope
from .report import Report, count

SHARDS_FILE = "shards file"


@dataclass(frozen=True)
class Placed:
    """A placement of the shards file, and its process when one runs."""

    spec: PlacementSpec
    pid: int | None

    @property
    def label(self) -> str:
        return f"{self.spec.id} (shards file)"

    @property
    def missing(self) -> str:
        """What finds no process for it, for a line that says so."""
        if self.spec.pid is not None:
            return f"pid {self.spec.pid} is not running"
        return f"no running process matches {self.spec.match!r}"


def check_shards_file(path: str, report: Report, scope: ProcessScope = EVERY) -> list[Placed]:
    """The file's placements with their processes (a `match` among those `scope` admits);
    one line for the file, and one for each entry it cannot use. Blocking."""
    specs, problems = parse_shards_file(Path(path))
    tracked = [Tracked(Placement(spec, "file")) for spec in specs]
    find_processes(tracked, ProcTable(), scope)
    placed = [Placed(t.placement.spec, t.pid) for t in tracked]
    for problem in problems:
        found = problem.removeprefix(f"{SHARDS_FILE} ")
        report.fail(SHARDS_FILE, found, "fix it as the message says (docs/shards.md)")
    by_id = {t.placement.spec.id: t for t in tracked}
    for sid, holder in shared_processes(by_id).items():
        report.fail(
            SHARDS_FILE,
            f"{named(sid, by_id[sid].placement)} names process {by_id[sid].pid}, which "
            f"{named(holder, by_id[holder].placement)} holds: the worker refuses it",
            "one process is one shard: remove one of the two entries (docs/shards.md)",
        )
    if specs or not problems:
        running = sum(p.pid is not None for p in placed)
        report.ok(SHARDS_FILE, f"{path}: {count(len(specs), 'placement')}, {running} running")
    return placed
