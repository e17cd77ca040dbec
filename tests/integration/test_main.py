"""`python -m placewatch`, for a host where the console script is not on PATH."""

from __future__ import annotations

import json
import subprocess
import sys

from placewatch import __version__

from tests.conftest import ROOT, clean_env


def module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "placewatch", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_module_runs_the_command_line() -> None:
    done = module("--version")
    assert (done.returncode, done.stdout) == (0, f"placewatch {__version__}\n")


def test_its_exit_status_is_the_commands() -> None:
    done = module()
    assert done.returncode == 2
    assert done.stdout.startswith("usage: placewatch [-h] [--version] COMMAND ...")
    done = module("sample", "--interval", "0")
    assert done.returncode == 2
    assert (
        done.stderr
        == "placewatch: --interval: Expected `float` >= 0.1; give a number of seconds from 0.1 to 86400\n"
    )


PLAIN_INSTALL = """
import runpy, sys
# As a plain (non-editable) install finds packages: by path alone, no editable finder.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.argv = ["placewatch", "sample", "--json", "--no-discover"]
runpy.run_module("placewatch", run_name="__main__")
"""


def test_the_module_runs_from_the_checkouts_root_where_the_folder_shadows_an_install() -> None:
    """From the root, `placewatch/` is found before any install; its siblings schemas/,
    worker/ and consumer/ must import from the same checkout."""
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_INSTALL],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["node"]
