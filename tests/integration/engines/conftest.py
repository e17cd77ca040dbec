"""The real-engine lane's fixture: one test's servers, shards file and workers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from tests.conftest import FakeGpuTools, NatsServer
from tests.support.engine_lane import Lane, descendants
from tests.support.llama_server import LlamaServers


@pytest.fixture
def lane(
    llama_servers: LlamaServers,
    cpu_only_build: Path,
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    tmp_path: Path,
) -> Iterator[Lane]:
    lane = Lane(llama_servers, nats_server, fake_gpu, tmp_path)
    yield lane
    for pid in [c for s in lane.started for c in descendants(s.pid)]:
        with suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
