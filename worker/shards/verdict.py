"""The verdict: where a shard placed on GPUs really computes, and one sentence on why.

Engine evidence outranks memory: llama.cpp with 0 of 29 layers offloaded
still allocates a CUDA compute buffer of over 1 GiB, and a CUDA build whose
backend failed to load still answers health checks from the CPU. Memory is
the rest of the account: what the shard's processes hold on each GPU, as the
driver lists it. The driver lists host PIDs, so a worker that cannot see
them (a container without the host's PID namespace) cannot tell, and says
`unknown`, never `cpu_fallback`. What a shard's router server says of it (Ollama's /api/ps:
"100% GPU") is its plan and belief, weighed after the engine's own lines and against memory:
a model it calls all on the GPU whose processes hold no GPU memory computes on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from placewatch.schemas import ACTIVITY_WINDOW_S, DeviceUse, GpuSample
from placewatch.schemas.messages import Backend, Verdict

from ..engines import ModelClaim, engine_named
from ..engines.evidence import EngineEvidence
from .activity import Activity, IdleServing
from .placements import Placement

GIB = 1 << 30

ADVICE_LLAMA = "run it with -lv 4 to see where its layers go"
ADVICE_VERBOSITY = "run it with -lv 4 (or LLAMA_ARG_LOG_VERBOSITY=4)"
ADVICE_LIBS = "check its CUDA/ROCm libraries with ldd on libggml-cuda.so (or libggml-hip.so)"
ADVICE_DOCTOR = "run `placewatch doctor` on this node"
NO_GPU_LISTED = "lists no GPU device, only the CPU"
"""What a llama.cpp whose `device_info` named only the CPU said (b11434 at `-lv 4`): ahead of
its 0 offloaded layers, since it is why there were 0."""


@dataclass
class Observation:
    """What one tick saw of one shard."""

    placement: Placement
    pid: int | None
    alive: bool
    ready: bool
    gpus_known: bool
    """The GPU tools answered this tick."""
    held: dict[int, int | None] = field(default_factory=dict)
    """GPU index -> bytes the shard's processes hold there (None: listed, size not given)."""
    hidden: dict[int, str] = field(default_factory=dict)
    """GPU index -> why memory there may belong to processes this worker cannot see."""
    evidence: EngineEvidence | None = None
    activity: Activity | None = None
    """What its processes ran on its GPUs while its engine served (activity.py)."""
    claim: ModelClaim | None = None
    """What its router server says of its model (claims.py)."""


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str
    backend: Backend = "unknown"
    devices: tuple[DeviceUse, ...] = ()
    layers_offloaded: int | None = None
    layers_total: int | None = None
    evidence: tuple[str, ...] = ()
    stale: bool = False
    """Given by evidence that has been lost since; see ComputeStatus.stale."""
    stale_since: datetime | None = None
    """When that evidence was last had; see ComputeStatus.stale_since."""


def _gpu_list(indices: list[int] | set[int]) -> str:
    ordered = sorted(indices)
    word = "GPU" if len(ordered) == 1 else "GPUs"
    return f"{word} {', '.join(str(i) for i in ordered)}"


def _size(n: int | None) -> str:
    return "memory" if n is None else f"{n / GIB:.1f} GiB"


GpuIds = list[tuple[int, str | None, str]]
"""Each GPU's index, uuid and vendor: all that judge() reads of the GPUs beside `obs`."""


def gpu_ids(gpus: list[GpuSample]) -> GpuIds:
    return [(g.index, g.uuid, g.vendor) for g in gpus]


def judge(obs: Observation, gpus: list[GpuSample]) -> Judgement:
    """The verdict: first what decides before any evidence (gone, meant for the CPU, not ready),
    then the engine's own word, then the memory its processes hold; a `gpu` verdict stands
    only if its processes did something on its GPUs while its engine served."""
    case = _Case(obs, gpus)
    judged = _before_evidence(case) or _engine_word(case) or _server_word(case) or _memory(case)
    if judged.verdict == "gpu":
        return _idle_while_serving(case) or judged
    return judged


class _Case:
    """One shard's observation, with what every step of the verdict reads from it."""

    def __init__(self, obs: Observation, gpus: list[GpuSample]) -> None:
        self.obs = obs
        self.spec = obs.placement.spec
        self.placed = set(self.spec.gpus)
        self.said = obs.evidence
        """Everything the engine's log said, its verbosity alone included."""
        self.ev = obs.evidence if obs.evidence is not None and obs.evidence.known else None
        self.floor = self.spec.min_gpu_bytes or 0
        uuids = {g.index: g.uuid for g in gpus}
        self.devices = tuple(
            DeviceUse(index=i, uuid=uuids.get(i), used_bytes=n or 0)
            for i, n in sorted(obs.held.items())
        )
        self.gpu_backend: Backend = _vendor_backend(gpus, self.placed or set(obs.held))
        self.vendors = {g.index: g.vendor for g in gpus}
        self.engine = (self.ev.engine if self.ev else None) or self.spec.engine or "the engine"

    def verdict(self, v: Verdict, reason: str, backend: Backend = "unknown") -> Judgement:
        """The judgement, with the lines the engine's findings came from: a log that said only
        its verbosity shows that line, which is why a reason names `-lv 4`."""
        ev = self.ev
        return Judgement(
            v,
            reason,
            backend,
            self.devices,
            ev.layers_offloaded if ev else None,
            ev.layers_total if ev else None,
            tuple(self.said.lines[-5:]) if self.said else (),
        )

    def backend(self) -> Backend:
        """The engine's backend where it names one the contract knows, else the GPUs' vendor's."""
        return _engine_backend(self.ev, self.gpu_backend)

    def see_layers(self) -> str | None:
        """Advice to run the engine so that it says where its layers go; None for a llama.cpp
        that said a verbosity from 4 up, which prints its load lines already."""
        said = self.obs.evidence
        if said is not None and said.verbosity is not None and not said.load_lines_hidden:
            return None
        return ADVICE_LLAMA

    def verbosity_note(self) -> str | None:
        """Why the engine's output is silent and the flag that makes it speak, when llama.cpp
        said a verbosity that hides its load lines (b11434's default, `verbosity = 3`)."""
        said = self.obs.evidence
        if said is None or not said.load_lines_hidden:
            return None
        engine = said.engine or self.engine
        return (
            f"{engine} runs at verbosity {said.verbosity}, which hides where its layers go: "
            f"{ADVICE_VERBOSITY}"
        )

    def with_note(self, reason: str) -> str:
        """`reason`, and the verbosity note where the engine's verbosity hides its load lines."""
        note = self.verbosity_note()
        return f"{reason}; {note}" if note else reason

    def fix_backend(self) -> str:
        """What to check when the engine says its GPU backend is missing or failed: for a
        build without one, what its engine says to run instead."""
        ev = self.ev
        engine = engine_named(ev.engine) if ev is not None and ev.cpu_only_build else None
        fix = engine.cpu_only_build_fix(self.gpu_backend) if engine is not None else None
        return fix or ADVICE_LIBS

    @property
    def engine_says_gpu(self) -> bool:
        """The engine says it offloaded every layer."""
        ev = self.ev
        return (
            ev is not None
            and ev.layers_offloaded is not None
            and ev.layers_total is not None
            and ev.layers_offloaded == ev.layers_total
            and ev.layers_total > 0
        )


def _before_evidence(case: _Case) -> Judgement | None:
    """Gone, meant for unknown GPUs or for the CPU, or not ready: no evidence is weighed."""
    spec, obs = case.spec, case.obs
    if not obs.alive:
        if spec.pid is None and spec.match:
            return case.verdict(
                "gone",
                f"no running process matches {spec.match!r}; start the engine or fix the pattern",
            )
        return case.verdict(
            "gone", f"pid {spec.pid or obs.pid} is not running; nothing computes for this shard"
        )
    if obs.placement.gpus_unknown:
        return case.verdict(
            "unknown",
            case.with_note(
                f"cannot tell which GPUs it was meant for: {obs.placement.gpus_unknown}"
            ),
        )
    on_purpose = obs.placement.cpu_on_purpose
    if not case.placed:
        why = f" ({on_purpose})" if on_purpose else ""
        return case.verdict("cpu", f"placed on the CPU on purpose{why}", "CPU")
    if on_purpose:  # placed on GPUs, and its own flags say the CPU: the flags are meant
        return case.verdict(
            "cpu",
            f"on the CPU on purpose: its own flags say so ({on_purpose}), though placed on "
            f"{_gpu_list(case.placed)}; drop {on_purpose} to use them, or place it on no GPU",
            "CPU",
        )
    if not obs.ready:
        return case.verdict(
            "starting", "not ready yet: waiting for its health check or grace period"
        )
    return None


def _engine_word(case: _Case) -> Judgement | None:
    """What the engine says outranks memory: computing on the CPU, or only partly on GPUs."""
    ev, engine, placed = case.ev, case.engine, case.placed
    if ev is None:
        return None
    said = _engine_says_cpu(case, ev)
    if said is not None:
        return case.verdict("cpu_fallback", said, "CPU")
    offloaded, total = ev.layers_offloaded, ev.layers_total
    if offloaded is not None and total and 0 < offloaded < total:
        see = case.see_layers()
        return case.verdict(
            "partial",
            f"placed on {_gpu_list(placed)} but {engine} offloaded only {offloaded} of {total} "
            f"layers: the rest compute on the CPU; give it more GPU memory or fewer layers "
            f"elsewhere{f' ({see})' if see else ''}",
            case.backend(),
        )
    cpu_w, gpu_w = ev.cpu_weight_bytes or 0, ev.gpu_weight_bytes or 0
    if offloaded is not None and offloaded == total and cpu_w > GIB and cpu_w > gpu_w // 4:
        return case.verdict(
            "partial",
            f"placed on {_gpu_list(placed)}; {engine} offloaded all {total} layers but keeps "
            f"{_size(cpu_w)} of weights on the CPU (tensor overrides such as -ot put experts "
            "there); check its -ot/--override-tensor options",
            case.backend(),
        )
    return None


def _server_word(case: _Case) -> Judgement | None:
    """Its router server's word that the model is on the CPU, or only partly on GPUs, whatever
    memory its processes hold (a CPU model still allocates a GPU compute buffer)."""
    claim, placed = case.obs.claim, case.placed
    if claim is None or claim.where == "gpu":
        return None
    held = sum(n or 0 for i, n in case.obs.held.items() if i in placed)
    though = f", though its processes hold {_size(held)} there" if held else ""
    if claim.where == "cpu":
        return case.verdict(
            "cpu_fallback",
            f"placed on {_gpu_list(placed)} but computing on the CPU: {claim.source} says "
            f"{claim.said()}{though}; {ADVICE_LIBS}, or {ADVICE_DOCTOR}",
            "CPU",
        )
    return case.verdict(
        "partial",
        f"placed on {_gpu_list(placed)} but {claim.source} says {claim.said()}: the rest "
        "computes on the CPU; give it more GPU memory or fewer models alongside",
        case.backend(),
    )


def _masks_of(case: _Case, gpus: set[int]) -> str:
    """The device masks that choose among `gpus`: Intel's where they are all Intel GPUs."""
    if gpus and all(case.vendors.get(i) == "intel" for i in gpus):
        return "ONEAPI_DEVICE_SELECTOR / ZE_AFFINITY_MASK"
    return "CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES"


def _memory(case: _Case) -> Judgement:
    """Where the shard's processes hold memory, against where it was placed."""
    obs, placed, floor = case.obs, case.placed, case.floor
    holding = {i for i, n in obs.held.items() if n is None or (n >= floor if floor else n > 0)}
    outside, inside = holding - placed, holding & placed
    if outside:
        elsewhere = sum(obs.held[i] or 0 for i in outside)
        return case.verdict(
            "misplaced",
            f"placed on {_gpu_list(placed)} but holds {_size(elsewhere)} "
            f"on {_gpu_list(outside)}: check its {_masks_of(case, outside)} and device options",
            case.gpu_backend,
        )
    if not obs.gpus_known:
        return _without_gpu_tools(case)
    if inside == placed:
        # Memory alone: a llama.cpp at 0 layers holds a CUDA compute buffer too, and only its
        # load lines would tell, so a verbosity that hides them is named.
        return case.verdict(
            "gpu",
            case.with_note(
                f"holds {_held_size(obs.held, placed)} on {_gpu_list(placed)} as placed"
            ),
            case.backend(),
        )
    if inside:
        return case.verdict(
            "partial",
            f"placed on {_gpu_list(placed)} but holds memory only on {_gpu_list(inside)}, none on "
            f"{_gpu_list(placed - inside)}: the engine did not take all its GPUs; check its device "
            "and split options",
            case.gpu_backend,
        )
    return _nothing_held(case)


def _without_gpu_tools(case: _Case) -> Judgement:
    """No GPU tool answered: the engine's own word, or nothing to tell by."""
    if case.engine_says_gpu:
        total = case.ev.layers_total if case.ev else 0
        return case.verdict(
            "gpu",
            f"{case.engine} says it offloaded all {total} layers; the GPU tools did not answer, "
            "so its memory was not checked",
            case.backend(),
        )
    note = case.verbosity_note()
    silent = note or "the engine's output says nothing of its devices"
    return case.verdict(
        "unknown",
        f"the GPU tools did not answer and {silent}; see `sources` in the telemetry, or "
        f"{ADVICE_DOCTOR}",
    )


def _nothing_held(case: _Case) -> Judgement:
    """None of its GPUs holds its memory: unseen holders, the engine's word, or the CPU."""
    placed = case.placed
    unseen = {i: why for i, why in case.obs.hidden.items() if i in placed}
    if unseen:
        index, why = sorted(unseen.items())[0]
        note = case.verbosity_note()
        return case.verdict(
            "unknown",
            f"holds no memory this worker can see on {_gpu_list(placed)}, but GPU {index} {why}; "
            "run the worker in the host's PID namespace (--pid=host)"
            + (f"; {note}" if note else ""),
        )
    claim = case.obs.claim
    if claim is not None:  # all on the GPU, it says: memory says otherwise
        return case.verdict(
            "cpu_fallback",
            f"placed on {_gpu_list(placed)} but computing on the CPU: {claim.source} says "
            f"{claim.said()}, yet its processes hold no memory the GPU tools list there; "
            f"{ADVICE_LIBS}, or {ADVICE_DOCTOR}",
            "CPU",
        )
    if case.engine_says_gpu:
        total = case.ev.layers_total if case.ev else 0
        return case.verdict(
            "gpu",
            f"{case.engine} says it offloaded all {total} layers, though its processes hold no "
            f"memory the driver lists on {_gpu_list(placed)}",
            case.backend(),
        )
    floor_note = f" (floor {_size(case.floor)})" if case.floor else ""
    checks = ", ".join(a for a in (ADVICE_LIBS, case.see_layers()) if a)
    return case.verdict(
        "cpu_fallback",
        f"placed on {_gpu_list(placed)} but computing on the CPU: its processes hold no memory "
        f"there{floor_note}, so its GPU backend did not load; {checks}, or {ADVICE_DOCTOR}",
        "CPU",
    )


def _idle_while_serving(case: _Case) -> Judgement | None:
    """Memory held, or the engine's word, but nothing run on its GPUs while it served."""
    activity = case.obs.activity
    idle = activity.idle_serving if activity is not None else None
    if idle is None:
        return None
    return case.verdict("cpu_fallback", _idle_reason(case, idle), "CPU")


def _idle_reason(case: _Case, idle: IdleServing) -> str:
    engine = idle.engine or case.engine
    n = idle.requests
    timed = f" ({idle.busy_s:.1f} s by its own timing)" if idle.busy_s is not None else ""
    gpus = _gpu_list(list(idle.gpus))
    held = _held_size(case.obs.held, set(idle.gpus))
    see = case.see_layers()
    named = engine_named(engine)
    advice = (
        f"check its {named.layers_flag} and that its GPU backend loaded"
        + (f" ({see})" if see else "")
        if named is not None and named.layers_flag
        else f"check that its GPU backend loaded ({case.fix_backend()})"
    )
    return (
        f"placed on {gpus} but computing on the CPU: {engine} served {n} "
        f"request{'' if n == 1 else 's'} within {ACTIVITY_WINDOW_S:.0f} s{timed} while its "
        f"processes showed 0% SM on {gpus} at all {idle.reads} reads taken meanwhile; the "
        f"{held} it holds there is not computing; {advice}, or {ADVICE_DOCTOR}"
    )


def _engine_says_cpu(case: _Case, ev: EngineEvidence) -> str | None:
    engine = case.engine
    where = f"placed on {_gpu_list(case.placed)} but computing on the CPU"
    if ev.gpu_failed:
        return f"{where}: {engine} says {ev.gpu_failed!r}; {case.fix_backend()}, or {ADVICE_DOCTOR}"
    if ev.no_gpu_listed:
        return f"{where}: {engine} {NO_GPU_LISTED}; {case.fix_backend()}, or {ADVICE_DOCTOR}"
    if ev.layers_total and ev.layers_offloaded == 0:
        see = case.see_layers()
        return (
            f"{where}: {engine} offloaded 0 of {ev.layers_total} layers; check its -ngl / "
            f"--n-gpu-layers and that its GPU backend loaded{f' ({see})' if see else ''}"
        )
    if ev.backend == "CPU":
        return f"{where}: {engine} reports the CPU as its compute device; {ADVICE_DOCTOR}"
    return None


def _held_size(held: dict[int, int | None], indices: set[int]) -> str:
    sizes = [held.get(i) for i in sorted(indices)]
    if any(n is None for n in sizes):
        return "memory"
    return _size(sum(n or 0 for n in sizes))


def _engine_backend(ev: EngineEvidence | None, fallback: Backend) -> Backend:
    """The engine's own word where the contract has a name for it (not Metal: no Linux GPU)."""
    said = ev.backend if ev is not None else None
    return cast(Backend, said) if said in {"CUDA", "ROCm", "SYCL", "Vulkan", "CPU"} else fallback


def _vendor_backend(gpus: list[GpuSample], indices: set[int]) -> Backend:
    """The backend a GPU's vendor implies where the engine did not say. An Intel GPU implies
    none: llama.cpp reaches it through SYCL or Vulkan alike, so only the engine's word names
    it."""
    vendors = {g.vendor for g in gpus if g.index in indices}
    if vendors == {"nvidia"}:
        return "CUDA"
    if vendors == {"amd"}:
        return "ROCm"
    return "unknown"
