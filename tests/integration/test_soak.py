"""bench/soak.py for 50 s: the server without JetStream, then with it and SIGKILLed, a tool
that answers garbage and hangs, a shards file broken now and then, an engine log truncated.
A shard on the CPU throughout fires once and never resolves."""

from __future__ import annotations

import argparse

import anyio

from bench.soak import ON_CPU, soak


def test_a_shard_on_the_cpu_throughout_fires_once_and_never_resolves_under_every_fault() -> None:
    args = argparse.Namespace(seconds=50.0, interval=0.5, kill_every=10.0, quiet=8.0, log=None)
    result = anyio.run(soak, args, backend="asyncio")
    on_cpu = result.stored.get(ON_CPU, [])
    assert on_cpu.count("fallback firing") == 1, (on_cpu, result.log[-3000:])
    assert on_cpu.count("fallback resolved") == 0, on_cpu
    assert set(on_cpu) <= {"fallback firing", "status cpu_fallback"}, on_cpu
    assert result.kills >= 1
    assert result.exit_code == 0
    assert "Traceback" not in result.log
