"""Stands in for a GPU vendor tool by replaying captured output.

Run as `gpu_tool.py TOOL ARGS...` through a wrapper named after the tool. It
answers from files under $FAKE_GPU_DIR/TOOL/, re-read on every call so a
test can change what the "driver" reports while a worker runs:

- nvidia-smi: `--query-gpu=...` -> query-gpu.csv, `--query-compute-apps=...`
  -> query-compute-apps.csv, `-q -x` -> q.xml;
- any other tool: output.txt.

A file named `refuse-csv` makes nvidia-smi reject CSV queries as an old
driver does. A file named `hang` makes the tool ignore SIGTERM and sleep for ever (a tool
stuck in the driver); a file named `fail` holds "CODE MESSAGE" to print the
message on stderr and exit with CODE; a file named `exit` holds the same, printed and
returned after the answer (a tool that printed what it could, then failed). A file named
`linger` makes the tool first start `sleep 300` in the background, holding its stdout and
stderr open after it exits, as a stand-in tool with `sleep 300 &` in it does.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def answer_file(tool: str, args: list[str]) -> str:
    if tool == "nvidia-smi":
        if any(a.startswith("--query-gpu=") for a in args):
            return "query-gpu.csv"
        if any(a.startswith("--query-compute-apps=") for a in args):
            return "query-compute-apps.csv"
        if "-q" in args and "-x" in args:
            return "q.xml"
    return "output.txt"


def main() -> int:
    tool, args = sys.argv[1], sys.argv[2:]
    here = Path(os.environ["FAKE_GPU_DIR"]) / tool
    with open(here / "calls.log", "a") as calls:
        calls.write(f"{os.getpid()} {' '.join(args)}\n")
    if (here / "hang").exists():
        # Stuck, deaf to SIGTERM, and with a child of its own: only killing the
        # whole process group leaves nothing behind.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(here / "calls.log", "a") as calls:
            calls.write(f"{child.pid} child\n")
        while True:
            time.sleep(3600)
    if (here / "linger").exists():
        child = subprocess.Popen(["sleep", "300"])  # inherits stdout and stderr
        with open(here / "calls.log", "a") as calls:
            calls.write(f"{child.pid} child\n")
    if (here / "fail").exists():
        code, _, message = (here / "fail").read_text().partition(" ")
        print(message.strip(), file=sys.stderr)
        return int(code)
    if (here / "refuse-csv").exists() and any(a.startswith("--query-") for a in args):
        # What an old driver says of a field it does not know.
        print('Field "mig.mode.current" is not a valid field to query.', file=sys.stderr)
        return 2
    path = here / answer_file(tool, args)
    if not path.exists():
        print("No devices were found", file=sys.stderr)
        return 6
    sys.stdout.write(path.read_text())
    if (here / "exit").exists():
        code, _, message = (here / "exit").read_text().partition(" ")
        print(message.strip(), file=sys.stderr)
        return int(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
