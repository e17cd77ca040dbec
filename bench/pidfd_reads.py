"""The /proc steps of a steady tick, with and without pidfds, for tick_instructions.py.

Valgrind 3.19 (Debian 12's) does not know pidfd_open: a worker run under it gets ENOSYS and
takes the path of a kernel before 5.3, where every tick reads each shard's and each GPU
process's /proc/PID/stat again and works each process's shard out anew. This runs the
worker's own functions (ProcTable, runs, owner) over the given processes for `ticks` ticks,
as a tick takes them:

- `fallback`: no read outlives its tick: refresh(), each shard's process looked up, the
  shard of each GPU process worked out, each GPU process looked up, the pidfds kept pruned;
- `held`: the reads kept from the first tick (as pidfds keep them while nothing exits):
  each shard's process and each GPU process looked up, from what is kept.

Run under callgrind with 0 ticks and with N of each, the differences are what the two paths
cost a tick, and fallback less held what pidfds spare a tick.

    python bench/pidfd_reads.py fallback|held TICKS GROUPS_JSON
"""

from __future__ import annotations

import json
import sys

from placewatch.worker.shards.attribution import ProcTable, owner
from placewatch.worker.shards.liveness import runs


def main() -> None:
    variant, ticks, groups = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    if variant not in ("fallback", "held"):
        sys.exit(f"pidfd_reads: {variant!r} is neither fallback nor held")
    table = ProcTable()
    shard_pids = {g[0]: f"shard-{i}" for i, g in enumerate(groups)}
    pids = [p for g in groups for p in g]
    started = {p: table.started(p) for p in shard_pids}
    owners = {p: owner(p, shard_pids, table) for p in pids}
    for _ in range(ticks):
        if variant == "fallback":
            table.refresh()
        ok = all(runs(table, p, started[p]) for p in shard_pids)
        if variant == "fallback":
            owners = {p: owner(p, shard_pids, table) for p in pids}
        seen = sum(table.visible(p) for p in pids)
        if variant == "fallback":
            table.keep_only(table.used)
        if not ok or seen != len(pids) or None in owners.values():
            sys.exit("pidfd_reads: a process of the node exited or is not its shard's")


if __name__ == "__main__":
    main()
