"""Fixtures of the alerts tests: a webhook, `placewatch alerts` processes, a node whose
worker makes a shard fire, change verdict and resolve."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FakeGpuTools, NatsServer, Worker
from tests.support.alerts_cli import Alerts
from tests.support.fleet_node import ShardNode
from tests.support.http_endpoint import Endpoint


@pytest.fixture
def webhook() -> Iterator[Endpoint]:
    hook = Endpoint()
    yield hook
    hook.close()


@pytest.fixture
def alerts() -> Iterator[list[Alerts]]:
    started: list[Alerts] = []
    yield started
    for a in started:
        if a.proc.poll() is None:
            a.kill()


@pytest.fixture
def node(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> ShardNode:
    return ShardNode(nats_server.url, fake_gpu, shard_procs, workers, tmp_path)
