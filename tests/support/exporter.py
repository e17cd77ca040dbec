"""`placewatch exporter` as a child process of a test."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request

from tests.conftest import clean_env, free_port, placewatch_cmd


class Exporter:
    """`placewatch exporter` as a child process, stopped with SIGTERM."""

    def __init__(self, url: str, *extra: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                *placewatch_cmd(),
                "exporter",
                "--nats",
                url,
                "--listen",
                f"127.0.0.1:{self.port}",
                *extra,
            ],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the exporter did not listen within 15 s")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def wait_metrics(self, check: str, present: bool = True, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.metrics()
            if (check in text) == present:
                return text
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"/metrics {'lacks' if present else 'keeps'} {check!r}:\n{text}"
                )
            time.sleep(0.2)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err
