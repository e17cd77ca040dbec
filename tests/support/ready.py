"""Waiting for a server started as a child process to say it is ready over HTTP."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path


def wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, seconds: float) -> None:
    """Until GET `url` answers 200; RuntimeError with the server's log if it exits first,
    or after `seconds`."""
    what = Path(str(proc.args[0] if isinstance(proc.args, list) else proc.args)).name
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer {url} within {seconds:g} s")
