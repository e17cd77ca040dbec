"""The node every consumer test reads: a real worker publishing two shards (fleet_node)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import FakeGpuTools, NatsServer, Worker
from tests.support.fleet_node import ShardNode


@pytest.fixture
def node(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> ShardNode:
    return ShardNode(nats_server.url, fake_gpu, shard_procs, workers, tmp_path)
