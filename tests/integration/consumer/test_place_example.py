"""docs/examples/place.py against a real server and a real worker: the GPUs that can take a
shard's bytes now, and none when no GPU has that much free."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from tests.conftest import ROOT
from tests.support.fleet_node import HOLDING_MIB, NODE, ShardNode

EXAMPLE = ROOT / "docs" / "examples" / "place.py"


def place(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), url, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_place_example_lists_the_gpus_that_can_take_the_bytes_most_free_first(
    node: ShardNode,
) -> None:
    node.start()
    node.wait_published()
    # a100x2-query-gpu.csv: GPU 0 has 40405 MiB free (39.5 GiB), GPU 1 81365 MiB (79.5 GiB)
    done = place(node.url, "--bytes", "30GiB")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [re.sub(r", [\d.]+ s old$", "", line) for line in lines] == [
        f"{NODE} GPU 1 NVIDIA A100-SXM4-80GB: 79.5 GiB free, 0.0 GiB foreign",
        f"{NODE} GPU 0 NVIDIA A100-SXM4-80GB: 39.5 GiB free, "
        f"{(40960 - HOLDING_MIB) / 1024:.1f} GiB foreign",
    ]
    ages = [float(m.group(1)) for m in (re.search(r"([\d.]+) s old$", x) for x in lines) if m]
    assert len(ages) == 2 and all(0 <= a < 3 for a in ages)  # the worker ticks every second

    done = place(node.url, "--bytes", "50GiB")
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        f"{NODE} GPU 1 NVIDIA A100-SXM4-80GB"
    ]

    done = place(node.url, "--bytes", "100GiB")
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["no GPU of a live node has 100.0 GiB free"]
    node.stop()


def test_place_example_names_a_node_gone_stale(node: ShardNode) -> None:
    node.start()
    node.wait_published()
    node.stop()
    time.sleep(1)  # the last sample is older than 0.5 s
    done = place(node.url, "--bytes", "1GiB", "--max-age", "0.5")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == "no GPU of a live node has 1.0 GiB free"
    assert re.fullmatch(rf"stale: {NODE}, last sample \d+ s ago \(limit 0.5 s\)", lines[1]), lines


def test_gateway_example_lists_live_gpus_and_names_a_stale_node_not_capacity(
    node: ShardNode,
) -> None:
    gateway = [sys.executable, str(ROOT / "docs" / "examples" / "gateway.py"), node.url]
    node.start()
    node.wait_published()
    done = subprocess.run(gateway, capture_output=True, text=True, timeout=30, check=True)
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        f"{NODE} GPU 0 NVIDIA A100-SXM4-80GB: 39.5 GiB free",
        f"{NODE} GPU 1 NVIDIA A100-SXM4-80GB: 79.5 GiB free",
    ]
    assert f"{NODE} shard holding: gpu" in lines
    node.stop()
    deadline = time.monotonic() + 15  # three of its 1 s intervals without a sample
    while time.monotonic() < deadline:
        done = subprocess.run(gateway, capture_output=True, text=True, timeout=30, check=True)
        if "stale" in done.stdout:
            break
    lines = done.stdout.splitlines()
    assert re.fullmatch(rf"{NODE} stale: last sample \d+ s ago, not capacity", lines[0]), lines
    assert not any("GiB free" in line for line in lines)
