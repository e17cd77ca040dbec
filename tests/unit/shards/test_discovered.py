"""When the shard pass walks the processes again, and what an engine keeps while the GPU tools
are silent: a stand-in walk, and a clock the test moves."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Collection, Sequence

import anyio
import psutil

from placewatch.schemas import GpuSample, PlacementSpec
from placewatch.worker.shards.discover import Discovered
from placewatch.worker.shards.discovered import DISCOVERY_EVERY_S, DiscoveryWalks, NewProcesses
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.scope import ProcessScope

from tests.support.eventually import eventually

GPUS = [GpuSample(index=0, uuid="GPU-0")]


class Node:
    """Engines by pid, found as discover() would on the GPUs it is given; `others` the node's
    other processes."""

    def __init__(self, *pids: int) -> None:
        self.pids = list(pids)
        self.others = [1, 2]
        self.walks = 0

    def new(self) -> NewProcesses:
        """What each tick between walks looks at: this node's pids, not the machine's."""
        return NewProcesses(lambda: [*self.others, *self.pids], lambda pid: pid in self.pids)

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
    walks = DiscoveryWalks(lambda: now[0], walk=node.walk, new=node.new())
    found(walks, GPUS, None)
    node.others.append(3)  # a new process, no engine
    now[0] += DISCOVERY_EVERY_S - 1
    assert [p.spec.pid for p in found(walks, GPUS, None)] == [101]
    assert node.walks == 1
    now[0] += 1
    assert [p.spec.pid for p in found(walks, GPUS, None)] == [101]
    assert node.walks == 2


def test_a_new_engine_is_found_at_the_next_tick_not_the_next_walk() -> None:
    node, now = Node(101), [1000.0]
    walks = DiscoveryWalks(lambda: now[0], walk=node.walk, new=node.new())
    found(walks, GPUS, None)
    node.pids.append(102)
    now[0] += 1
    assert [p.spec.pid for p in found(walks, GPUS, None)] == [101, 102]
    now[0] += 1
    assert [p.spec.pid for p in found(walks, GPUS, None)] == [101, 102]
    assert node.walks == 2  # one walk for the new engine, none for the tick after


def test_a_fork_that_execs_an_engine_by_the_next_look_is_found() -> None:
    running, execed = [1], set[int]()
    new = NewProcesses(lambda: running, lambda pid: pid in execed)
    new.reset()
    running.append(7)
    assert not new.engine_started()  # pid 7 still shows its parent's command line
    execed.add(7)
    assert new.engine_started()  # it exec'ed llama-server since
    assert not new.engine_started()  # looked at twice; later, it is the walk's


def execed(pid: int) -> bool:
    return psutil.Process(pid).cmdline() == ["sleep", "30"]


def test_a_new_engine_out_of_the_worker_s_scope_starts_no_walk() -> None:
    running, engines = [1], {1}
    marked = ProcessScope.parse("PLACEWATCH_TEST_MARK=mine")
    new = NewProcesses(lambda: running, lambda pid: pid in engines, marked)
    new.reset()
    other = subprocess.Popen(["sleep", "30"], env={"PLACEWATCH_TEST_MARK": "another"})
    mine = subprocess.Popen(["sleep", "30"], env={"PLACEWATCH_TEST_MARK": "mine"})
    try:
        for pid in (other.pid, mine.pid):  # exec'ed: its own environment, not this process's
            eventually(functools.partial(execed, pid))
        running.append(other.pid)
        engines.add(other.pid)
        assert not new.engine_started()  # an engine, but another's
        running.append(mine.pid)
        engines.add(mine.pid)
        assert new.engine_started()
    finally:
        for proc in (other, mine):
            proc.kill()
            proc.wait()


def test_an_engine_found_while_the_tools_answered_keeps_its_gpus_while_they_are_silent() -> None:
    node, now = Node(101), [1000.0]
    walks = DiscoveryWalks(lambda: now[0], walk=node.walk, new=node.new())
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
    walks = DiscoveryWalks(lambda: 1000.0, walk=node.walk, new=node.new())
    (untold,) = found(walks, [], ["nvml", "nvidia-smi"])
    assert (untold.origin, untold.gpu_request) == ("discovered", "-ngl 99")
    assert untold.gpus_unknown == "no GPU tool answered (nvml, nvidia-smi)"
