"""Stands in for a GPU vendor tool by replaying captured output.

Run as `gpu_tool.py TOOL ARGS...` through a wrapper named after the tool. It
answers from files under $FAKE_GPU_DIR/TOOL/, re-read on every call so a
test can change what the "driver" reports while a worker runs:

- nvidia-smi: `--query-gpu=...` -> query-gpu.csv, `--query-compute-apps=...`
  -> query-compute-apps.csv, `-q -x` -> q.xml, `pmon ...` -> pmon.txt;
- xpu-smi: `discovery -j` -> discovery.json, `discovery -d N -j` -> discovery-N.json,
  `dump ...` -> dump.csv;
- any other tool: output.txt.

A file named `refuse-csv` makes nvidia-smi reject CSV queries as an old
driver does; a file named `unknown-fields` (one field a line) makes it reject a query that
asks for any of them, naming the first as a driver does, and answer every other. A file named `hang` makes the tool ignore SIGTERM and sleep for ever (a tool
stuck in the driver); a file named `fail` holds "CODE MESSAGE" to print the
message on stderr and exit with CODE; a file named `exit` holds the same, printed and
returned after the answer (a tool that printed what it could, then failed). A file named
`linger` makes the tool first start `sleep 300` in the background, holding its stdout and
stderr open after it exits, as a stand-in tool with `sleep 300 &` in it does.

A `--query-*` with `--loop-ms=N` (`-lms N`, `--loop=S`, `-l S`) loops as nvidia-smi does:
the header once, then every N ms a pass of the answer's rows, the file read again for each
pass (a compute-apps answer without rows prints nothing for a pass). Before each pass it
looks for two faults, each acted on once (the file is removed): `loop-hang` stops printing
and hangs as `hang` does, `loop-crash` holds "CODE MESSAGE" to print the message on stderr
and exit with CODE. While a file named `loop-hold` exists, a looping tool that starts prints
nothing yet (a driver slow to open its GPUs). A file named `refuse-loop` makes it refuse the
loop option, as a build that does not know it would. A file named `refuse-m` makes it refuse
`-m`, as xpu-smi 2.0.0's dump does.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

APPS_BASE = "apps-base.csv"
"""The compute-apps answer the GPU answer was written with."""


def answer_file(tool: str, args: list[str]) -> str:
    if tool == "nvidia-smi":
        if any(a.startswith("--query-gpu=") for a in args):
            return "query-gpu.csv"
        if any(a.startswith("--query-compute-apps=") for a in args):
            return "query-compute-apps.csv"
        if "-q" in args and "-x" in args:
            return "q.xml"
        if args[:1] == ["pmon"]:
            return "pmon.txt"
    if tool == "xpu-smi" and args[:1] == ["discovery"]:
        device = args[args.index("-d") + 1] if "-d" in args[:-1] else None
        return "discovery.json" if device is None else f"discovery-{device}.json"
    if tool == "xpu-smi" and args[:1] == ["dump"]:
        return "dump.csv"
    return "output.txt"


def loop_seconds(args: list[str]) -> float | None:
    """The interval of a looping query, or None for a query that runs once."""
    for i, arg in enumerate(args):
        for flag, scale in (("--loop-ms", 1000), ("-lms", 1000), ("--loop", 1), ("-l", 1)):
            if arg.startswith(flag + "="):
                return float(arg.split("=", 1)[1]) / scale
            if arg == flag and i + 1 < len(args):
                return float(args[i + 1]) / scale
    return None


def hang(here: Path) -> None:
    """Stuck, deaf to SIGTERM, and with a child of its own: only killing the whole process
    group leaves nothing behind."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(here / "calls.log", "a") as calls:
        calls.write(f"{child.pid} child of {os.getpid()}\n")
    while True:
        time.sleep(3600)


def taken(path: Path) -> bool:
    """Whether the fault file was there; it is removed, so that it strikes once."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _mib_by_gpu(compute_apps: str) -> dict[str, int]:
    """Each GPU's (by uuid) MiB held by the processes of a compute-apps answer."""
    lines = [line.split(", ") for line in compute_apps.splitlines() if line.strip()]
    if not lines or "gpu_uuid" not in lines[0] or "used_gpu_memory [MiB]" not in lines[0]:
        return {}
    uuid, used = lines[0].index("gpu_uuid"), lines[0].index("used_gpu_memory [MiB]")
    held: dict[str, int] = {}
    for row in lines[1:]:
        if len(row) == len(lines[0]) and row[used].isdigit():
            held[row[uuid]] = held.get(row[uuid], 0) + int(row[used])
    return held


def follow_apps(query_gpu: str, before: str, after: str) -> str:
    """The query-gpu answer with each GPU's used and free memory moved by what its
    processes' memory moved from `before` to `after` (compute-apps answers)."""
    old, new = _mib_by_gpu(before), _mib_by_gpu(after)
    lines = query_gpu.splitlines()
    if not lines:
        return query_gpu
    header = lines[0].split(", ")
    if not {"uuid", "memory.used [MiB]", "memory.free [MiB]"} <= set(header):
        return query_gpu
    uuid, used, free = (header.index(h) for h in ("uuid", "memory.used [MiB]", "memory.free [MiB]"))
    out = [lines[0]]
    for line in lines[1:]:
        row = line.split(", ")
        moved = new.get(row[uuid], 0) - old.get(row[uuid], 0) if len(row) == len(header) else 0
        if moved and row[used].isdigit() and row[free].isdigit():
            row[used] = str(int(row[used]) + moved)
            row[free] = str(max(int(row[free]) - moved, 0))
        out.append(", ".join(row))
    return "\n".join(out) + "\n"


def answer_text(here: Path, answer: Path) -> str:
    """The answer as written; a GPU query's with each GPU's memory moved with its processes
    since it was written (APPS_BASE), so that both answers change at one write."""
    text = answer.read_text()
    base, now = here / APPS_BASE, here / "query-compute-apps.csv"
    if answer.name == "query-gpu.csv" and base.exists() and now.exists():
        return follow_apps(text, base.read_text(), now.read_text())
    return text


def loop(here: Path, answer: Path, seconds: float) -> int:
    """Print the answer's header once, then its rows every `seconds`, as nvidia-smi loops."""
    header_printed = False
    while (here / "loop-hold").exists():
        time.sleep(0.02)
    while True:
        if taken(here / "loop-hang"):
            hang(here)
        crash = here / "loop-crash"
        if crash.exists():
            code, _, message = crash.read_text().partition(" ")
            taken(crash)
            print(message.strip(), file=sys.stderr, flush=True)
            return int(code)
        lines = answer_text(here, answer).splitlines() if answer.exists() else []
        rows = lines[1:] if header_printed else lines
        header_printed = header_printed or bool(lines)
        if rows:
            sys.stdout.write("".join(line + "\n" for line in rows))
            sys.stdout.flush()
        time.sleep(seconds)


def main() -> int:
    tool, args = sys.argv[1], sys.argv[2:]
    here = Path(os.environ["FAKE_GPU_DIR"]) / tool
    with open(here / "calls.log", "a") as calls:
        calls.write(f"{os.getpid()} {' '.join(args)}\n")
    if (here / "hang").exists():
        hang(here)
    if (here / "linger").exists():
        child = subprocess.Popen(["sleep", "300"])  # inherits stdout and stderr
        with open(here / "calls.log", "a") as calls:
            calls.write(f"{child.pid} child of {os.getpid()}\n")
    if (here / "fail").exists():
        code, _, message = (here / "fail").read_text().partition(" ")
        print(message.strip(), file=sys.stderr)
        return int(code)
    if (here / "refuse-csv").exists() and any(a.startswith("--query-") for a in args):
        # What an old driver says of a field it does not know.
        print('Field "mig.mode.current" is not a valid field to query.', file=sys.stderr)
        return 2
    unknown = here / "unknown-fields"
    asked = [f for a in args if a.startswith("--query-") for f in a.split("=", 1)[1].split(",")]
    refused = set(unknown.read_text().split()) if unknown.exists() else set()
    for field in asked:
        if field in refused:
            print(f'Field "{field}" is not a valid field to query.', file=sys.stderr)
            return 2
    if (here / "refuse-m").exists() and "-m" in args:
        # xpu-smi 2.0.0's dump, which takes --metrics, not 1.3.x's -m (CLI11's words).
        print("The following argument was not expected: -m", file=sys.stderr)
        return 106
    path = here / answer_file(tool, args)
    seconds = loop_seconds(args)
    if seconds is not None and any(a.startswith("--query-") for a in args):
        if (here / "refuse-loop").exists():
            print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
            return 2
        return loop(here, path, seconds)
    if not path.exists():
        print("No devices were found", file=sys.stderr)
        return 6
    sys.stdout.write(answer_text(here, path))
    if (here / "exit").exists():
        code, _, message = (here / "exit").read_text().partition(" ")
        print(message.strip(), file=sys.stderr)
        return int(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
