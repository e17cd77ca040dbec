"""`placewatch alerts` as a child process, stopped with SIGTERM or killed; its stderr in a
file (tests/support/child.py)."""

from __future__ import annotations

import signal
import subprocess

from tests.conftest import clean_env, placewatch_cmd
from tests.support.child import LoggedChild


class Alerts(LoggedChild):
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        argv = [*placewatch_cmd(), "alerts", *args]
        super().__init__(argv, clean_env() | (env or {}), "placewatch alerts")

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
