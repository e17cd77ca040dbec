"""`python -m placewatch`, for a host where the console script is not on PATH."""

from __future__ import annotations

import subprocess
import sys

from placewatch import __version__

from tests.conftest import clean_env


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
