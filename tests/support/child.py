"""A placewatch command as a child process whose stderr goes to a file, so that a test can
wait for a line it writes (`wait_for`) while it runs, and read all of it once it stopped."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tests.support.eventually import eventually


class LoggedChild:
    def __init__(self, argv: list[str], env: dict[str, str], what: str) -> None:
        fd, path = tempfile.mkstemp(prefix=f"placewatch-{what}-", suffix=".err")
        os.close(fd)
        self.what = what
        self.err_path = Path(path)
        with self.err_path.open("a") as err:  # O_APPEND: the child writes, the test reads
            self.proc = subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True
            )

    def err(self) -> str:
        """What it has written to stderr so far."""
        return self.err_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 15) -> str:
        """Its stderr once it holds `text`; fails after `timeout` seconds, or if it exits."""

        def said() -> bool:
            return text in self.err() or self.proc.poll() is not None

        eventually(said, timeout, what=f"{text!r} in the stderr of {self.what}")
        err = self.err()
        assert text in err, f"{self.what} exited {self.proc.returncode} without {text!r}: {err}"
        return err

    def close(self) -> None:
        """Killed if it runs, and its stderr's file removed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self.err_path.unlink(missing_ok=True)
