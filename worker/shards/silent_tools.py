"""A discovered engine meant for GPUs, on a node where no GPU tool answered: its own word.

Which GPUs such an engine meant to use, and what it holds on them, only the GPU tools can
tell, so its verdict is `unknown` (verdict.py reads that from its `gpus_unknown`), never
`cpu`. What the engine says of itself needs no GPU tool: llama.cpp b11434 built without a
GPU backend prints "warning: no usable GPU found, --gpu-layers option will be ignored" on
stderr for `-ngl 99`, and at `-lv 4` lists no GPU among its devices; an engine may say it
offloaded 0 layers, or name the CPU as its compute device. That is a fallback by its own
word, and fires as one. Its word that it offloaded layers says nothing of which GPUs hold
them, so that leaves it `unknown`.
"""

from __future__ import annotations

from ..engines import engine_named
from ..engines.evidence import EngineEvidence
from .placements import Placement
from .verdict import ADVICE_DOCTOR, ADVICE_LIBS, NO_GPU_LISTED, Judgement


def engine_says_cpu(placement: Placement, evidence: EngineEvidence | None) -> Judgement | None:
    """`cpu_fallback` when a discovered engine that asked for GPUs while the GPU tools were
    silent says it computes on the CPU; None for any other shard or word."""
    request = placement.gpu_request
    if request is None or evidence is None or not evidence.known:
        return None
    said = _cpu_word(evidence)
    if said is None:
        return None
    engine = evidence.engine or placement.spec.engine or "the engine"
    named = engine_named(evidence.engine) if evidence.cpu_only_build else None
    build = named.cpu_only_build_fix(None) if named is not None else None  # GPUs not told
    fix = build or ADVICE_LIBS
    return Judgement(
        "cpu_fallback",
        f"asked for GPUs ({request}) but computing on the CPU: {engine} {said}; "
        f"{fix}; the GPU tools did not answer either: {ADVICE_DOCTOR}",
        "CPU",
        layers_offloaded=evidence.layers_offloaded,
        layers_total=evidence.layers_total,
        evidence=tuple(evidence.lines[-5:]),
    )


def _cpu_word(ev: EngineEvidence) -> str | None:
    """What the engine said that puts it on the CPU, as the reason says it."""
    if ev.gpu_failed:
        return f"says {ev.gpu_failed!r}"
    if ev.no_gpu_listed:
        return NO_GPU_LISTED
    if ev.layers_total and ev.layers_offloaded == 0:
        return f"offloaded 0 of {ev.layers_total} layers"
    if ev.backend == "CPU":
        return "reports the CPU as its compute device"
    return None
