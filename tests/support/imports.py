"""Which top-level modules importing a module pulls in, read in a fresh interpreter."""

from __future__ import annotations

import functools
import subprocess
import sys


@functools.cache
def imported_by(*modules: str) -> frozenset[str]:
    """The full names of every module in sys.modules once `modules` are imported; asked once
    a test process (an interpreter starting takes a second on a busy machine)."""
    code = f"import sys, {', '.join(modules)}; print(*sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return frozenset(out.stdout.split())


def top_level(names: frozenset[str]) -> set[str]:
    return {name.split(".")[0] for name in names}
