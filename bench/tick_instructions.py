"""The instructions a steady tick of `placewatch run` executes, counted by callgrind.

The same node as bench/loop_cost.py (8 GPUs, 64 GPU processes, 16 shards, the looping
nvidia-smi stand-in, a nats-server of its own, discovery off unless `--discover`), with the
worker run under `valgrind --tool=callgrind`: its counters are zeroed once it has published
`--warmup` telemetry messages and dumped `--ticks` messages later. Callgrind counts the
worker's own instructions in user space, the interpreter's and the libraries' included,
and nothing of the kernel's: the same count for the same code whatever else the machine
does, where the CPU time of loop_cost.py moves by tens of percent with this VM's moods. So
it tells whether a change to the worker made its tick cheaper, by how much, at once; what
a node pays in CPU is still loop_cost.py's figure.

The worker runs about fifty times slower under callgrind: a tick still fits its interval,
its start takes a minute. Needs valgrind (Debian's package).

A valgrind that does not know pidfd_open (3.19, Debian 12's, answers ENOSYS) runs the worker
on the path of a kernel without pidfds, which reads every shard's and GPU process's
/proc/PID/stat each tick. This is probed first and said; the /proc steps of a tick are then
counted apart on both paths (bench/pidfd_reads.py, the worker's functions over the same
processes) and the count is given as it would be with pidfds too.

    python bench/tick_instructions.py [--ticks N] [--warmup N] [--interval S] [--discover]
        [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import nats
from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.loop_cost import looping_worker  # noqa: E402
from bench.servers import nats_server, placewatch_cmd, worker_env  # noqa: E402
from bench.synthetic import query_apps_of, write_fake_nvidia_smi  # noqa: E402
from bench.tick_cost import GPUS, shard_processes, shards_file  # noqa: E402

START_S = 300.0
"""How long the worker may take to its first telemetry under callgrind."""


async def count_ticks(url: str, worker: subprocess.Popen[bytes], warmup: int, ticks: int) -> None:
    """Zero the worker's counters after `warmup` telemetry messages, dump them `ticks` later."""
    nc = await nats.connect(url)
    seen = 0
    zeroed = anyio.Event()
    done = anyio.Event()

    async def tick(_: Msg) -> None:
        nonlocal seen
        seen += 1
        if seen == warmup:
            zeroed.set()
        elif seen == warmup + ticks:
            done.set()

    await nc.subscribe("placewatch.telemetry.*", cb=tick)
    try:
        for event, limit in ((zeroed, START_S), (done, START_S + ticks * 10.0)):
            with anyio.move_on_after(limit):
                while not event.is_set():
                    if worker.poll() is not None:
                        sys.exit("tick_instructions: the worker exited; see its log")
                    await anyio.sleep(0.05)
            if not event.is_set():
                sys.exit(f"tick_instructions: {seen} telemetry messages in {limit:g} s")
            # Just after a tick: the whole of each of the next ticks falls between the two.
            await anyio.sleep(0.3)
            verb = "--zero" if event is zeroed else "--dump"
            await anyio.run_process(["callgrind_control", verb, str(worker.pid)])
    finally:
        await nc.close()


def summary(out: Path) -> int:
    """The instructions a callgrind dump counted (its `summary:` line)."""
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"tick_instructions: no summary in {out}")


def valgrind_has_pidfds() -> bool:
    """Whether a program run under this valgrind can open a pidfd."""
    probe = "import os; os.close(os.pidfd_open(os.getpid()))"
    ran = subprocess.run(
        ["valgrind", "--tool=none", "-q", sys.executable, "-c", probe],
        check=False,
        capture_output=True,
    )
    return ran.returncode == 0


def proc_steps(groups: list[list[int]], ticks: int, tmp: Path) -> tuple[float, float]:
    """The instructions a tick's /proc steps take (without pidfds, with them), each the
    count of `ticks` ticks less that of none, over a tick."""
    counts = {}
    for variant, n in (("held", 0), ("fallback", ticks), ("held", ticks)):
        out = tmp / f"reads-{variant}-{n}.out"
        reads = [sys.executable, str(ROOT / "bench" / "pidfd_reads.py"), variant, str(n)]
        valgrind = ["valgrind", "--tool=callgrind", "-q", f"--callgrind-out-file={out}"]
        subprocess.run([*valgrind, *reads, json.dumps(groups)], check=True)
        counts[variant, n] = summary(out)
    base = counts["held", 0]
    return (counts["fallback", ticks] - base) / ticks, (counts["held", ticks] - base) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20, help="ticks counted (20)")
    parser.add_argument("--warmup", type=int, default=5, help="telemetry messages first (5)")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--discover", action="store_true", help="leave discovery on")
    parser.add_argument(
        "--keep", type=Path, metavar="FILE", help="keep the dump there, for callgrind_annotate"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("tick_instructions: needs valgrind (apt-get install valgrind)")
    pidfds = valgrind_has_pidfds()
    with (
        tempfile.TemporaryDirectory() as tmp_name,
        shard_processes() as groups,
        nats_server() as url,
    ):
        tmp = Path(tmp_name)
        shards = shards_file(tmp, groups, GPUS)
        holders = [(s % GPUS, pid) for s, pids in enumerate(groups) for pid in pids]
        bin_dir = write_fake_nvidia_smi(tmp, GPUS, query_apps_of(holders), python=sys.executable)
        out = tmp / "callgrind.out"
        argv = looping_worker(url, args.interval, shards.path, discover=args.discover)
        script = placewatch_cmd()
        python = [] if script[0] == sys.executable else [sys.executable]
        valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        started = time.monotonic()
        with open(tmp / "worker.log", "w") as log:
            worker = subprocess.Popen(
                [*valgrind, *python, *argv], env=worker_env(bin_dir), stdout=log, stderr=log
            )
            try:
                anyio.run(count_ticks, url, worker, args.warmup, args.ticks)
            finally:
                worker.terminate()
                worker.wait(60)
        dumps = sorted(tmp.glob("callgrind.out.*"))
        if not dumps:
            sys.exit(
                f"tick_instructions: no dump; the worker said:\n{(tmp / 'worker.log').read_text()}"
            )
        counted = summary(dumps[0])
        if args.keep is not None:
            shutil.copyfile(dumps[0], args.keep)
        steps = None if pidfds else proc_steps(groups, args.ticks, tmp)
    print(
        f"tick instructions: `placewatch run` under callgrind at a {args.interval:g} s interval, "
        f"nvidia-smi looping (the interpreter stand-in), {GPUS} GPUs, 16 shards, discovery "
        f"{'on' if args.discover else 'off'}; {args.ticks} ticks counted after {args.warmup} "
        f"({time.monotonic() - started:.0f} s in all)"
    )
    print(f"instructions a tick: {counted / args.ticks:,.0f}")
    if steps is not None:
        without, held = steps
        print(
            "this valgrind does not know pidfd_open: the worker counted ran as on a kernel "
            "without pidfds, reading every shard's and GPU process's /proc/PID/stat each tick"
        )
        print(
            f"its /proc steps a tick: {without:,.0f} instructions so, {held:,.0f} with pidfds "
            "(bench/pidfd_reads.py, the same processes)"
        )
        print(
            f"instructions a tick with pidfds, as deployed: {counted / args.ticks - without + held:,.0f}"
        )


if __name__ == "__main__":
    main()
