"""When the shard pass walks the processes again, and what an engine keeps while the GPU tools
are silent: a stand-in walk, and a clock the test moves."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import anyio

from placewatch.schemas import GpuSample, PlacementSpec
from placewatch.worker.shards.discover import Discovered
from placewatch.worker.shards.discovered import DISCOVERY_EVERY_S, DiscoveryWalks
from placewatch.worker.shards.placements import Placement

GPUS = [GpuSample(index=0, uuid="GPU-0")]


class Node:
    """Engines by pid, found as discover() would on the GPUs it is given."""

    def __init__(self, *pids: int) -> None:
        self.pids = list(pids)
        self.walks = 0

    def walk(
        self,
        gpus: Sequence[GpuSample],
        exclude: Collection[int],
        *,
        tools_silent: Sequence[str] | None = None,
    ) -> list[Discovered]:
        self.walks += 1
        found = []
        for pid in self.pids:
            spec = PlacementSpec(id=f"llama-server-{pid}", pid=pid, gpus=[g.index for g in gpus])
            untold = f"no GPU tool answered ({', '.join(tools_silent)})" if tools_silent else None
            found.append(
                Discovered(
                    spec,
                    "llama.cpp",
                    gpus_unknown=untold,
                    gpu_request="-ngl 99" if untold else None,
                )
            )
        return found


def found(
    walks: DiscoveryWalks, gpus: list[GpuSample], silent: list[str] | None
) -> list[Placement]:
    return anyio.run(walks.found, gpus, silent, set(), backend="asyncio")


def test_a_walk_stands_until_it_is_time_for_the_next() -> None:
    node, now = Node(101), [1000.0]
    walks = DiscoveryWalks(lambda: now[0], walk=node.walk)
    found(walks, GPUS, None)
    node.pids.append(102)
    now[0] += DISCOVERY_EVERY_S - 1
    assert [p.spec.pid for p in found(walks, GPUS, None)] == [101]
    now[0] += 1
    assert [p.spec.pid for p in found(walks, GPUS, None)] == [101, 102]
    assert node.walks == 2


def test_an_engine_found_while_the_tools_answered_keeps_its_gpus_while_they_are_silent() -> None:
    node, now = Node(101), [1000.0]
    walks = DiscoveryWalks(lambda: now[0], walk=node.walk)
    (told,) = found(walks, GPUS, None)
    node.pids.append(102)
    # One failed read: walked again at once, the tools having stopped answering.
    kept, new = found(walks, [], ["nvidia-smi"])
    assert kept is told and kept.spec.gpus == [0] and kept.gpus_unknown is None
    assert (new.spec.pid, new.gpu_request) == (102, "-ngl 99")
    assert new.gpus_unknown == "no GPU tool answered (nvidia-smi)"
    # They answer again: walked at once, and the new engine is placed on what they list.
    now[0] += 1
    assert [(p.spec.pid, p.spec.gpus, p.gpus_unknown) for p in found(walks, GPUS, None)] == [
        (101, [0], None),
        (102, [0], None),
    ]
    assert node.walks == 3


def test_on_a_node_whose_tools_never_answer_every_engine_is_untold() -> None:
    node = Node(101)
    walks = DiscoveryWalks(lambda: 1000.0, walk=node.walk)
    (untold,) = found(walks, [], ["nvml", "nvidia-smi"])
    assert (untold.origin, untold.gpu_request) == ("discovered", "-ngl 99")
    assert untold.gpus_unknown == "no GPU tool answered (nvml, nvidia-smi)"
