"""Runs an engine with its stderr on its stdout, in the environment given.

    python -I -S merged_exec.py N NAME=VALUE... (N of them) ENGINE [ARG]...

llama.cpp prints `Available devices:` on stdout but `load_backend: failed to
load ...` on stderr; the doctor's probe runner keeps stdout, so the two are
merged here, in the order the engine wrote them. The script replaces itself
with the engine (no process stays in between to outlive a timeout) and exits
127 with a line saying why when the engine cannot be run. It is run as a file
with `-I -S`, so it imports the standard library only.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    lent = int(argv[1])
    env = dict(os.environ)
    for assignment in argv[2 : 2 + lent]:
        name, value = assignment.split("=", 1)
        env[name] = value
    engine = argv[2 + lent :]
    os.dup2(1, 2)
    try:
        os.execve(engine[0], engine, env)  # noqa: S606 - the engine's own argv, no shell
    except OSError as exc:
        print("cannot run", engine[0] + ":", exc.strerror)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
