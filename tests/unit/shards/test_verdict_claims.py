"""A router server's word on a model (Ollama's /api/ps) weighed against memory and the
engine's own lines: a model it calls all on the GPU whose processes hold no GPU memory
computes on the CPU (ollama#12722: `ollama ps` said 100% GPU while no VRAM was used)."""

from __future__ import annotations

from placewatch.schemas import PlacementSpec
from placewatch.worker.engines import ModelClaim
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.engines.ollama.server import SOURCE
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.verdict import judge

from tests.conftest import FIXTURES
from tests.unit.shards.test_verdict import GPUS, obs

GiB = 1 << 30
ALL = ModelClaim(SOURCE, 6038591897, 6038591897)
NONE = ModelClaim(SOURCE, 7401216409, 0)
HALF = ModelClaim(SOURCE, 10 * GiB, 5 * GiB)
FULL_LOG = read_text((FIXTURES / "ollama" / "0.33-cuda-full.stderr.log").read_text())


def test_all_on_the_gpu_said_but_no_gpu_memory_held_is_a_fallback_quoting_both() -> None:
    j = judge(obs([0], {}, claim=ALL), GPUS)
    assert (j.verdict, j.backend) == ("cpu_fallback", "CPU")
    assert j.reason.startswith(
        "placed on GPU 0 but computing on the CPU: Ollama's /api/ps says 100% GPU (5.6 GiB of "
        "5.6 GiB in GPU memory), yet its processes hold no memory the GPU tools list there; "
    )


def test_its_word_outranks_the_engine_s_offloaded_layers_when_no_memory_is_held() -> None:
    assert FULL_LOG.layers_offloaded == FULL_LOG.layers_total == 29
    alone = judge(obs([0], {}, evidence=FULL_LOG), GPUS)
    assert alone.verdict == "gpu"  # the engine's word alone, where a driver lists nothing
    both = judge(obs([0], {}, evidence=FULL_LOG, claim=ALL), GPUS)
    assert both.verdict == "cpu_fallback"
    assert "100% GPU" in both.reason and "hold no memory" in both.reason


def test_all_on_the_gpu_said_and_memory_held_there_is_gpu() -> None:
    j = judge(obs([0], {0: 6 * GiB}, claim=ALL), GPUS)
    assert j.verdict == "gpu"


def test_none_on_the_gpu_said_is_a_fallback_whatever_memory_is_held() -> None:
    j = judge(obs([0], {0: GiB}, claim=NONE), GPUS)
    assert (j.verdict, j.backend) == ("cpu_fallback", "CPU")
    assert j.reason.startswith(
        "placed on GPU 0 but computing on the CPU: Ollama's /api/ps says 100% CPU (0.0 GiB of "
        "6.9 GiB in GPU memory), though its processes hold 1.0 GiB there; "
    )


def test_part_on_the_gpu_said_is_partial() -> None:
    j = judge(obs([0], {0: 5 * GiB}, claim=HALF), GPUS)
    assert j.verdict == "partial"
    assert j.reason.startswith(
        "placed on GPU 0 but Ollama's /api/ps says 50%/50% CPU/GPU (5.0 GiB of 10.0 GiB in "
        "GPU memory): the rest computes on the CPU"
    )


def test_the_cpu_on_purpose_stays_cpu_whatever_it_says() -> None:
    placement = Placement(PlacementSpec(id="s", pid=42, gpus=[0]), "discovered", None, "-ngl 0")
    assert judge(obs([0], {}, claim=NONE, placement=placement), GPUS).verdict == "cpu"
