"""docs/gateways.md's examples in Go (nats.go) and JavaScript (npm `nats`) against a real
`placewatch run`: each says to avoid a shard's backend when it falls back to the CPU, and to
serve it when it computes on its GPU again.

The worker reads a fake nvidia-smi; its one shard, a real process placed on GPU 1 with an
endpoint, first holds nothing there (`cpu_fallback`), then 1 GiB (`gpu`). The Go example is
built in GOPATH mode against Debian's nats.go (`golang-github-nats-io-go-nats-dev`, which
.ci/run installs with `golang-go`); without them it skips, saying so.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import FIXTURES, ROOT, FakeGpuTools, NatsServer, Worker, apps
from tests.integration.test_interop import nats_js  # noqa: F401 - the fixture, shared
from tests.support.natsproto import RawSubscriber

EXAMPLES = ROOT / "docs" / "examples"
GOPATH = Path("/usr/share/gocode")
"""Where Debian's Go library packages put their source."""
GPU1 = "GPU-9d2e4b61-27c3-4f0a-b8e5-6a1c3d5f7b92"
AVOID = "avoid http://10.0.0.7:8080/llm gpu-07/llama-8b-a cpu_fallback"
SERVE = "serve http://10.0.0.7:8080/llm gpu-07/llama-8b-a gpu"


class Lines:
    """An example's output, a line at a time within a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next(self, timeout: float) -> str:
        line = self.lines.get(timeout=max(timeout, 0.01))
        if line is None:
            raise EOFError("the example exited")
        return line


@pytest.fixture
def worker(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, tmp_path: Path, workers: list[Worker]
) -> Iterator[int]:
    """A worker whose one shard (its pid yielded) holds nothing on GPU 1, where it is placed,
    once its cpu_fallback status is published."""
    shard = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "llama-8b-a"\npid = {shard.pid}\ngpus = [1]\n'
        'endpoint = { host = "10.0.0.7", port = 8080, path_prefix = "/llm" }\n'
    )
    args = ["--nats", nats_server.url, "--node", "gpu-07", "--shards", str(shards)]
    args += ["--grace", "0", "--interval", "0.5", "--no-discover"]
    with RawSubscriber(nats_server.url, "placewatch.compute.>") as sub:
        workers.append(Worker(*args, env=fake_gpu.env()))
        assert b'"verdict":"cpu_fallback"' in sub.next(timeout=20).payload
    yield shard.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(shard.pid, signal.SIGKILL)
    shard.wait()


def follow_example(argv: list[str], fake_gpu: FakeGpuTools, pid: int, env: dict[str, str]) -> None:
    """Runs an example: it says to avoid the shard, then, once nvidia-smi lists the shard's
    memory on GPU 1, to serve it."""
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
    )
    said: list[str] = []
    try:
        assert child.stdout is not None
        lines = Lines(child.stdout)
        deadline = time.monotonic() + 20
        while AVOID not in said:
            said.append(lines.next(deadline - time.monotonic()))
        # Only the processes' answer: the fake tool moves GPU 1's used memory with it, which
        # is what tells the worker's looping query to list the processes again.
        fake_gpu.write("nvidia-smi", "query-compute-apps.csv", apps({pid: (GPU1, 1024)}))
        deadline = time.monotonic() + 20
        while SERVE not in said:
            said.append(lines.next(deadline - time.monotonic()))
        assert "ready" in said
    except (queue.Empty, EOFError):
        child.kill()
        raise AssertionError(f"the example said {said}; stderr: {child.communicate()[1]}") from None
    finally:
        child.kill()
        child.communicate()


def test_the_javascript_example_avoids_a_shard_on_the_cpu_and_serves_it_again(
    nats_js: Path,  # noqa: F811 - the fixture imported above
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    worker: int,
) -> None:
    argv = ["node", str(EXAMPLES / "avoid.cjs"), nats_server.url]
    follow_example(argv, fake_gpu, worker, {"NODE_PATH": str(nats_js)})


def test_the_go_example_avoids_a_shard_on_the_cpu_and_serves_it_again(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, worker: int, tmp_path: Path
) -> None:
    go = shutil.which("go")
    if go is None or not (GOPATH / "src" / "github.com" / "nats-io" / "nats.go").is_dir():
        pytest.skip(
            "Go and nats.go are needed: apt-get install golang-go golang-github-nats-io-go-nats-dev"
        )
    binary = tmp_path / "avoid"
    env = {"GO111MODULE": "off", "GOPATH": str(GOPATH), "GOCACHE": str(tmp_path / "gocache")}
    built = subprocess.run(
        [go, "build", "-o", str(binary), str(EXAMPLES / "avoid.go")],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    follow_example([str(binary), nats_server.url], fake_gpu, worker, {})
