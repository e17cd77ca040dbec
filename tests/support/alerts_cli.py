"""`placewatch alerts` as a child process, stopped with SIGTERM or killed. Its stderr goes to
a file, so that a test can wait for a line (`wait_for`) while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import clean_env, placewatch_cmd
from tests.support.eventually import eventually


class Alerts:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        fd, path = tempfile.mkstemp(prefix="placewatch-alerts-", suffix=".err")
        os.close(fd)
        self.err_path = Path(path)
        with self.err_path.open("a") as err:  # O_APPEND: the child writes, the test reads
            self.proc = subprocess.Popen(
                [*placewatch_cmd(), "alerts", *args],
                env=clean_env() | (env or {}),
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def err(self) -> str:
        """What it has written to stderr so far."""
        return self.err_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 15) -> None:
        """Until its stderr holds `text`; fails after `timeout` seconds."""
        eventually(lambda: text in self.err(), timeout, what=f"{text!r} in alerts' stderr")

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM; (exit code, stdout, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            return -1, out, self.err()
        return self.proc.returncode, out, self.err()

    def kill(self) -> str:
        """SIGKILL, as a crash or the OOM killer does; its stderr."""
        self.proc.kill()
        self.proc.communicate()
        return self.err()

    def close(self) -> None:
        """Killed if it runs, and its stderr's file removed."""
        if self.proc.poll() is None:
            self.kill()
        self.err_path.unlink(missing_ok=True)
