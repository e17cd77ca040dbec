"""`placewatch exporter` as a child process of a test."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request
from datetime import UTC, datetime

from nats.aio.client import Client

from placewatch.schemas import NodeSample, encode, lean, subjects

from tests.conftest import clean_env, free_port, placewatch_cmd
from tests.support.eventually import eventually


async def publish_nodes(nc: Client, names: list[str]) -> None:
    """Each node's inventory and telemetry, as a worker publishes them."""
    for node in names:
        sample = NodeSample(node=node, session="s", seq=0, time=datetime.now(UTC), interval_s=1)
        inventory, telemetry = lean.split(sample)
        for message, subject in (
            (inventory, subjects.inventory(node)),
            (telemetry, subjects.telemetry(node)),
        ):
            payload, headers = encode(message)
            await nc.publish(subject, payload, headers=headers)
    await nc.flush()


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
        eventually(self._listens, 15, what="the exporter listening")

    def _listens(self) -> bool:
        assert self.proc.poll() is None, self.proc.communicate()
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
        except OSError:
            return False
        return True

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def wait_metrics(self, check: str, present: bool = True, timeout: float = 20) -> str:
        """/metrics once `check` is in it (or, `present` False, once it is not)."""
        seen = [""]

        def holds() -> bool:
            seen[0] = self.metrics()
            return (check in seen[0]) == present

        said = f"/metrics {'with' if present else 'without'} {check!r}"
        eventually(holds, timeout, every=0.2, what=said)
        return seen[0]

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err
