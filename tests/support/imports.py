"""Which top-level modules importing a module pulls in, read in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def imported_by(*modules: str) -> set[str]:
    """The full names of every module in sys.modules once `modules` are imported."""
    code = f"import sys, {', '.join(modules)}; print(*sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def top_level(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}
