"""`placewatch alerts` as a child process, stopped with SIGTERM or killed."""

from __future__ import annotations

import signal
import subprocess

from tests.conftest import clean_env, placewatch_cmd


class Alerts:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*placewatch_cmd(), "alerts", *args],
            env=clean_env() | (env or {}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM; (exit code, stdout, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            return -1, out, err
        return self.proc.returncode, out, err

    def kill(self) -> str:
        """SIGKILL, as a crash or the OOM killer does; its stderr."""
        self.proc.kill()
        _, err = self.proc.communicate()
        return err
