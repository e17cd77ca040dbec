"""Inference engines running on the node that nothing placed, and the GPUs they meant to use.

Not every shard has a placement: Ollama starts one runner process per loaded
model, each with its own CUDA_VISIBLE_DEVICES (HIP_/ROCR_VISIBLE_DEVICES on
AMD) and a port of its own, and people start llama-server or vLLM by hand.
Discovery finds them by command line, and reads the GPUs each meant to use
from its device mask and its own flags, so that a runner which came up on
the CPU is caught like a placed shard would be.

What the flags mean, per engine (read from llama.cpp's common/arg.cpp,
Ollama's llm/server.go, llama-cpp-python's server settings and vLLM's engine
arguments):

- llama.cpp (llama-server, llama-cli): `-ngl 0` and `--device none` keep the
  model on the CPU; `--device CUDA1,CUDA2` picks runtime devices (numbered
  within the device mask); `-sm none` uses only `-mg N` (default 0) of them.
  Every flag can also come from a LLAMA_ARG_* variable, which the command
  line overrides. An absent `-ngl` is not the CPU on purpose: older builds
  defaulted to 0 layers, newer ones to all, and a forgotten `-ngl` is worth
  a fallback alert.
- llama-cpp-python (`python -m llama_cpp.server`): underscore flags, and
  `n_gpu_layers` defaults to 0, so no flag means the CPU.
- Ollama: `ollama serve` computes nothing; each model runs in `ollama
  runner` (older releases: `ollama_llama_server`). Ollama passes
  `--n-gpu-layers 0` when the model's options say num_gpu 0; when it falls
  back to the CPU itself (no usable GPU, too little free VRAM) it passes no
  layer count, so that case stays a GPU placement. Newer releases pass no
  layer count at all (layers go in a load request). A runner without
  `--model` is the short-lived probe newer releases start to find GPUs.
- vLLM: the first tensor-parallel x pipeline-parallel x local data-parallel
  visible GPUs; `--device cpu` (releases that had the flag) is the CPU.

A device mask that cannot be translated, or runtime device numbers whose
order is not the bus order, are reported in `gpus_unknown`, never guessed.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import msgspec
import psutil

from placewatch.gpu.masks import DeviceMask, translate
from placewatch.schemas import GpuSample, PlacementSpec

LLAMA_CPP = "llama.cpp"
OLLAMA = "ollama"
VLLM = "vllm"

MAX_DEPTH = 64
"""Ancestors looked at when asking whether an engine process is another's child."""


@dataclass(frozen=True)
class Discovered:
    """An engine process found on the node, as a placement on the GPUs it meant to use."""

    spec: PlacementSpec
    engine: str
    """"llama.cpp", "ollama" or "vllm"."""
    gpus_unknown: str | None = None
    """Why the intended GPUs cannot be told; `spec.gpus` means nothing when set."""
    cpu_on_purpose: str | None = None
    """What says the engine was meant for the CPU ("-ngl 0", "CUDA_VISIBLE_DEVICES=-1")."""
    create_time: float = 0.0
    """The process's start, as psutil reports it (seconds since the epoch)."""


@dataclass(frozen=True)
class _Launch:
    """What the command line alone says: which engine, and its own arguments."""

    engine: str
    name: str
    """The id's stem: "llama-server", "ollama-runner", "vllm"..."""
    args: tuple[str, ...]
    """The engine's arguments, after the executable, module or subcommand."""
    dialect: str
    """Whose flags these are: "llama", "llama-cpp-python", "ollama" or "vllm"."""
    serves: bool = False
    """Whether it answers HTTP on a port (llama-cli and batch jobs do not)."""
    default_port: int | None = None
    """The port it serves on without a --port flag."""
    health: bool = False
    """Whether GET /health answers 2xx only once the model is loaded."""


@dataclass(frozen=True)
class _Intent:
    gpus: tuple[int, ...] = ()
    unknown: str | None = None
    cpu: str | None = None


_PYTHON = re.compile(r"python(\d+(\.\d+)*)?t?w?")
_RUNTIME_DEVICE = re.compile(r"(cuda|rocm|hip)(\d+)")
_LOOPBACK = {"", "0.0.0.0", "::", "localhost", "127.0.0.1", "[::]"}  # noqa: S104 - hosts read, not bound


def classify(
    cmdline: Sequence[str],
    env: Mapping[str, str] | None,
    pid: int,
    gpus: Sequence[GpuSample],
    *,
    create_time: float = 0.0,
) -> Discovered | None:
    """The engine `cmdline` runs and the GPUs it meant to use, or None for anything else.

    `env` is the process's environment, None when it could not be read; `gpus`
    are the node's GPUs. Pure: reads nothing but its arguments.
    """
    launch = _launch(cmdline)
    if launch is None:
        return None
    port = _port(launch, env)
    stem = f"{launch.name}-{port}" if port is not None else f"{launch.name}-{pid}"
    intent = _intent(launch, env, gpus)
    spec = PlacementSpec(
        id=stem,
        pid=pid,
        gpus=list(intent.gpus),
        engine=launch.engine,
        health_url=_health_url(launch, env, port),
    )
    return Discovered(
        spec=spec,
        engine=launch.engine,
        gpus_unknown=intent.unknown,
        cpu_on_purpose=intent.cpu,
        create_time=create_time,
    )


def discover(
    gpus: Sequence[GpuSample],
    exclude: Collection[int] = (),
    processes: Iterable[psutil.Process] | None = None,
) -> list[Discovered]:
    """Every engine process on the node whose pid is not in `exclude` (already placed), by id.

    One pass over /proc reads each process's command line, and nothing else:
    parent, start time and environment are read only for a recognised
    engine (on a node of 1000 processes the pass is most of the cost). A
    process that exits meanwhile, or that this worker may not read, is
    skipped. A child that is part of an engine of the same kind (vLLM's API
    servers, engine cores and workers; a fork that kept its parent's command
    line) is no shard of its own: the parent is, and its descendants count
    with it. Two engines on one port (each in its own container) get their
    pid added to the id.
    """
    seen = _scan(psutil.process_iter() if processes is None else processes)
    parents = _Parents(seen)
    found: list[Discovered] = []
    for pid, (process, cmdline, launch) in seen.items():
        if launch is None or pid in exclude:
            continue
        try:
            if _part_of_parent(pid, launch, seen, parents):
                continue
            created = process.create_time()
            env = _environ(process)
        except psutil.Error:  # it exited since the scan (or became a zombie)
            continue
        d = classify(cmdline, env, pid, gpus, create_time=created)
        if d is None:
            continue
        if d.spec.health_url and _other_network(pid):
            # Its loopback is its container's, not this worker's: judge it after the grace period.
            d = replace(d, spec=msgspec.structs.replace(d.spec, health_url=None))
        found.append(d)
    return _unique(found)


_Seen = tuple[psutil.Process, tuple[str, ...], "_Launch | None"]


def _scan(processes: Iterable[psutil.Process]) -> dict[int, _Seen]:
    """Every readable process: its command line, and the engine it runs if any."""
    seen: dict[int, _Seen] = {}
    for process in processes:
        # process.cmdline() alone is faster than process_iter(["cmdline"]), whose
        # per-process oneshot() costs more than the one file it reads (psutil 7.2).
        info = getattr(process, "info", None)
        try:
            if isinstance(info, dict) and "cmdline" in info:
                cmdline = info["cmdline"]
            else:
                cmdline = process.cmdline()
        except psutil.Error:
            continue
        cmdline = tuple(cmdline or ())  # None: a zombie, or one this worker may not read
        seen[process.pid] = (process, cmdline, _launch(cmdline))
    return seen


class _Parents:
    """Parent pids, read from /proc/PID/stat only when asked, each at most once."""

    def __init__(self, seen: Mapping[int, _Seen]) -> None:
        self._seen = seen
        self._ppids: dict[int, int | None] = {}

    def of(self, pid: int) -> int | None:
        if pid not in self._ppids:
            entry = self._seen.get(pid)
            try:
                self._ppids[pid] = entry[0].ppid() if entry is not None else None
            except psutil.Error:
                self._ppids[pid] = None
        return self._ppids[pid]


def _environ(process: psutil.Process) -> dict[str, str] | None:
    """The environment the process started with; None when this worker may not read it."""
    try:
        return process.environ()
    except psutil.AccessDenied:
        return None


def _part_of_parent(
    pid: int, launch: _Launch, seen: Mapping[int, _Seen], parents: _Parents
) -> bool:
    """Whether an ancestor is an engine of the same kind that this process is part of."""
    cmdline = seen[pid][1]
    ancestor = parents.of(pid)
    for _ in range(MAX_DEPTH):
        if ancestor is None or ancestor <= 0 or ancestor == pid or ancestor not in seen:
            return False
        _, above_cmdline, above = seen[ancestor]
        # vLLM's children are all its own; llama-server's router mode starts one
        # llama-server per model, each on its own port: a shard each.
        if (
            above is not None
            and above.engine == launch.engine
            and (launch.engine == VLLM or above_cmdline == cmdline)
        ):
            return True
        ancestor = parents.of(ancestor)
    return False


def _other_network(pid: int) -> bool:
    """True when the process is in another network namespace than this worker (a container)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False  # cannot tell (not Linux, or not permitted): assume the node's own


def _unique(found: list[Discovered]) -> list[Discovered]:
    counts: dict[str, int] = {}
    for d in found:
        counts[d.spec.id] = counts.get(d.spec.id, 0) + 1
    named = [
        d
        if counts[d.spec.id] == 1
        else replace(d, spec=msgspec.structs.replace(d.spec, id=f"{d.spec.id}-{d.spec.pid}"))
        for d in found
    ]
    return sorted(named, key=lambda d: d.spec.id)


# --- the command line -------------------------------------------------------------------


def _launch(cmdline: Sequence[str]) -> _Launch | None:
    """Which engine a command line starts; None for anything else (a shell, an editor, grep)."""
    if not cmdline:
        return None
    exe = _basename(cmdline[0])
    args = tuple(cmdline[1:])
    if _PYTHON.fullmatch(exe):
        return _python(args)
    if exe == "llama-server":
        return _Launch(
            LLAMA_CPP, "llama-server", args, "llama", serves=True, default_port=8080, health=True
        )
    if exe == "llama-cli":
        return _Launch(LLAMA_CPP, "llama-cli", args, "llama")
    if exe in ("ollama", "ollama_llama_server"):
        if args[:1] == ("runner",):
            args = args[1:]
        elif exe == "ollama":
            return None  # `ollama serve` schedules; `ollama run` is a client
        if _flag(args, {"--model"}, go=True) is None:
            return None  # the GPU discovery probe of newer releases: no model, gone in a second
        return _Launch(OLLAMA, "ollama-runner", args, "ollama", serves=True)
    if exe == "vllm":
        return _vllm_cli(args)
    return None


def _basename(arg: str) -> str:
    name = arg.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return name.removesuffix(".exe")


def _python(args: tuple[str, ...]) -> _Launch | None:
    target = _python_target(args)
    if target is None:
        return None
    kind, what, rest = target
    if kind == "script":
        return _vllm_cli(rest) if _basename(what) == "vllm" else None  # the console script
    if what == "llama_cpp.server":
        return _Launch(
            LLAMA_CPP, "llama-cpp-python", rest, "llama-cpp-python", serves=True, default_port=8000
        )
    if what == "vllm.entrypoints.cli.main":
        return _vllm_cli(rest)
    if what in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
        return _Launch(VLLM, "vllm", rest, "vllm", serves=True, default_port=8000, health=True)
    if what == "vllm.entrypoints.openai.run_batch":
        return _Launch(VLLM, "vllm-run-batch", rest, "vllm")
    return None


def _vllm_cli(args: tuple[str, ...]) -> _Launch | None:
    if args[:1] == ("serve",):
        return _Launch(VLLM, "vllm", args[1:], "vllm", serves=True, default_port=8000, health=True)
    if args[:1] == ("run-batch",):
        return _Launch(VLLM, "vllm-run-batch", args[1:], "vllm")
    return None  # `vllm chat`, `vllm complete`: clients of a server


def _python_target(args: tuple[str, ...]) -> tuple[str, str, tuple[str, ...]] | None:
    """("module", name, its args) or ("script", path, its args) from python's own options."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--", "-") or not arg.startswith("-"):
            at = i + 1 if arg == "--" else i
            if at >= len(args) or args[at] == "-":
                return None  # reads its program from stdin
            return "script", args[at], args[at + 1 :]
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        letters = arg[1:]
        for j, letter in enumerate(letters):  # options combine: -um module, -Wignore
            if letter in "mcWX":
                value = letters[j + 1 :]
                if not value:
                    i += 1
                    if i >= len(args):
                        return None
                    value = args[i]
                if letter == "m":
                    return "module", value, args[i + 1 :]
                if letter == "c":
                    return None
                break
        i += 1
    return None


def _flag(
    args: Sequence[str], names: Collection[str], *, go: bool = False
) -> tuple[str, str] | None:
    """The last value given for any of `names`, and the flag as written ("-ngl 0", "-ngl=0").

    Names are compared with `_` read as `-` (vLLM and llama-cpp-python accept
    both); `go` also reads `-port` as `--port`, as Go's flag package does.
    """
    found: tuple[str, str] | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        name, eq, value = arg.partition("=")
        key = name.replace("_", "-")
        if go and not key.startswith("--"):
            key = "-" + key
        if key not in names:
            continue
        if eq:
            found = (arg, value)
        elif i < len(args):
            found = (f"{name} {args[i]}", args[i])
            i += 1
    return found


def _setting(
    launch: _Launch, env: Mapping[str, str] | None, names: Collection[str], variable: str | None
) -> tuple[str, str] | None:
    """A flag from the command line, else from the variable the engine reads it from."""
    found = _flag(launch.args, names, go=launch.dialect == "ollama")
    if found is not None or env is None or variable is None:
        return found
    keys = [variable]
    if launch.dialect == "llama-cpp-python":
        keys.append(variable.lower())  # pydantic settings read either case
    for key in keys:
        if key in env:
            return f"{key}={env[key]}", env[key]
    return None


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


_LAYERS = {
    "llama": ({"-ngl", "--gpu-layers", "--n-gpu-layers"}, "LLAMA_ARG_N_GPU_LAYERS"),
    "ollama": ({"--n-gpu-layers"}, None),
    "llama-cpp-python": ({"--n-gpu-layers"}, "N_GPU_LAYERS"),
}
_DEVICE = {"llama": ({"-dev", "--device"}, "LLAMA_ARG_DEVICE"), "vllm": ({"--device"}, None)}
_SPLIT_MODE = {
    "llama": ({"-sm", "--split-mode"}, "LLAMA_ARG_SPLIT_MODE"),
    "llama-cpp-python": ({"--split-mode"}, "SPLIT_MODE"),
}
_MAIN_GPU = {
    "llama": ({"-mg", "--main-gpu"}, "LLAMA_ARG_MAIN_GPU"),
    "llama-cpp-python": ({"--main-gpu"}, "MAIN_GPU"),
}
_PORT = {
    "llama": ({"--port"}, "LLAMA_ARG_PORT"),
    "llama-cpp-python": ({"--port"}, "PORT"),
    "ollama": ({"--port"}, None),
    "vllm": ({"--port"}, None),
}
_HOST = {
    "llama": ({"--host"}, "LLAMA_ARG_HOST"),
    "llama-cpp-python": ({"--host"}, "HOST"),
    "vllm": ({"--host"}, None),
}
_NO_SETTING: tuple[set[str], None] = (set(), None)


def _get(
    table: Mapping[str, tuple[set[str], str | None]], launch: _Launch, env: Mapping[str, str] | None
) -> tuple[str, str] | None:
    names, variable = table.get(launch.dialect, _NO_SETTING)
    return _setting(launch, env, names, variable) if names else None


def _port(launch: _Launch, env: Mapping[str, str] | None) -> int | None:
    """The port it serves on; None for one that serves nothing, or on a unix socket."""
    if not launch.serves:
        return None
    if launch.dialect == "vllm" and _flag(launch.args, {"--uds"}) is not None:
        return None
    host = _get(_HOST, launch, env)
    if host is not None and host[1].endswith(".sock"):
        return None  # llama-server listens on a unix socket when --host names one
    found = _get(_PORT, launch, env)
    if found is None:
        return launch.default_port
    port = _int(found[1])
    return port if port is not None and 0 < port < 65536 else None  # 0: a random port


def _health_url(launch: _Launch, env: Mapping[str, str] | None, port: int | None) -> str | None:
    if not launch.health or port is None:
        return None
    host = _get(_HOST, launch, env)
    path = "/health"
    if launch.dialect == "llama":
        prefix = _setting(launch, env, {"--api-prefix"}, "LLAMA_ARG_API_PREFIX")
        if prefix is not None and prefix[1].strip("/"):
            path = "/" + prefix[1].strip("/") + path
    return f"http://{_url_host(host[1] if host else '')}:{port}{path}"


def _url_host(host: str) -> str:
    """Where to reach a server bound to `host` from this node."""
    host = host.strip()
    if host in _LOOPBACK:
        return "127.0.0.1"  # bound to every address, or to loopback
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host  # a host name
    if address.is_unspecified:
        return "127.0.0.1"
    return f"[{address}]" if address.version == 6 else str(address)


# --- the intended GPUs ------------------------------------------------------------------

_VENDORS = ("nvidia", "amd")
_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}


def _intent(launch: _Launch, env: Mapping[str, str] | None, gpus: Sequence[GpuSample]) -> _Intent:
    if launch.dialect == "llama-cpp-python":
        config = _setting(launch, env, {"--config-file"}, "CONFIG_FILE")
        if config is not None:
            return _Intent(
                unknown=f"its settings come from {config[0]}, which placewatch does not read; "
                "place this shard in a shards file to say which GPUs it should use"
            )
    cpu = _cpu_flag(launch, env)
    if cpu is not None:
        return _Intent(cpu=cpu)
    if not gpus:
        return _Intent()  # nothing else to compute on
    if env is None:
        return _Intent(
            unknown="its environment could not be read for a device mask "
            "(CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES); run the worker as root or as the "
            "engine's user, or place this shard in a shards file"
        )
    visible = _Visible(env, gpus)
    if visible.hidden is not None:
        return visible.hidden
    if launch.dialect == "vllm":
        return _vllm_gpus(launch, visible)
    if launch.dialect in ("llama", "llama-cpp-python"):
        return _llama_gpus(launch, env, visible)
    return visible.everything()


def _cpu_flag(launch: _Launch, env: Mapping[str, str] | None) -> str | None:
    """The flag (or variable) that keeps the model on the CPU, as written."""
    if launch.dialect == "vllm":
        device = _get(_DEVICE, launch, env)
        return device[0] if device and device[1].strip().lower() == "cpu" else None
    layers = _get(_LAYERS, launch, env)
    if layers is not None and _int(layers[1]) == 0:
        return layers[0]
    if launch.dialect == "llama-cpp-python" and layers is None and env is not None:
        return "no --n_gpu_layers (llama-cpp-python's default is 0 layers on the GPU)"
    device = _get(_DEVICE, launch, env)
    if device is not None and device[1].strip().lower() == "none":
        return device[0]
    split = _get(_SPLIT_MODE, launch, env)
    main = _get(_MAIN_GPU, launch, env)
    if split is not None and _split_none(split[1]) and main is not None:
        index = _int(main[1])
        if index is not None and index < 0:
            return f"{split[0]} {main[0]}"  # llama.cpp: no main GPU, no GPU at all
    return None


def _split_none(value: str) -> bool:
    """llama.cpp spells it `none`; llama-cpp-python takes LLAMA_SPLIT_MODE_NONE, 0."""
    return value.strip().lower() in ("none", "0")


class _Visible:
    """The GPUs a process may use, per vendor, in its runtime's order (physical indices)."""

    def __init__(self, env: Mapping[str, str], gpus: Sequence[GpuSample]) -> None:
        self.lists: dict[str, list[int]] = {}
        self.masks: dict[str, DeviceMask] = {}
        self.problems: dict[str, str] = {}
        self.hidden: _Intent | None = None
        for vendor in _VENDORS:
            mine = sorted((g for g in gpus if g.vendor == vendor), key=lambda g: g.index)
            if not mine:
                continue
            mask = translate(env, vendor, gpus)
            self.masks[vendor] = mask
            if mask.untranslatable is not None:
                self.problems[vendor] = mask.untranslatable
            elif mask.indices is not None:
                self.lists[vendor] = list(mask.indices)
            else:
                self.lists[vendor] = [g.index for g in mine]
        if self.masks and not self.problems and not any(self.lists.values()):
            self.hidden = _hidden(env, list(self.masks.values()), gpus)
        self._order = {v: _order_problem(env, v, gpus, m) for v, m in self.masks.items()}

    def vendor(self, vendor: str) -> list[int] | str:
        """The visible list of one vendor, or why it cannot be told."""
        if vendor in self.problems:
            return self.problems[vendor]
        if vendor not in self.lists:
            return f"this node has no {_VENDOR_NAMES[vendor]} GPU"
        return self.lists[vendor]

    def everything(self) -> _Intent:
        if self.problems:
            return _Intent(unknown=next(iter(self.problems.values())))
        return _Intent(gpus=tuple(sorted(i for lst in self.lists.values() for i in lst)))

    def check_order(self, vendor: str, chosen: Collection[int]) -> str | None:
        """Why picking `chosen` by runtime number cannot be told, when it is a proper subset."""
        if set(chosen) >= set(self.lists.get(vendor, ())):
            return None  # every visible GPU: the order does not matter
        return self._order.get(vendor)


def _hidden(env: Mapping[str, str], masks: list[DeviceMask], gpus: Sequence[GpuSample]) -> _Intent:
    """A mask that leaves no GPU: the CPU on purpose when it says so ("", "-1"), else a mistake."""
    written = []
    on_purpose = False
    for mask in masks:
        for variable in (mask.variable or "").split("+"):
            if variable in env:
                value = env[variable]
                written.append(f"{variable}={value}")
                first = value.split(",")[0].strip()
                on_purpose |= first == "" or (first.startswith("-") and first[1:].isdigit())
    text = " ".join(dict.fromkeys(written))
    if on_purpose:
        return _Intent(cpu=text)
    indices = ", ".join(str(g.index) for g in sorted(gpus, key=lambda g: g.index))
    return _Intent(
        unknown=f"{text} names no GPU of this node (GPUs {indices}); check the mask, "
        "or the GPU tools' list of this node's GPUs"
    )


def _order_problem(
    env: Mapping[str, str], vendor: str, gpus: Sequence[GpuSample], mask: DeviceMask
) -> str | None:
    """Why runtime device numbers are not bus order here, when they may not be.

    A mask lists devices in its own order, which translate() already read.
    Unmasked, CUDA numbers devices fastest first unless
    CUDA_DEVICE_ORDER=PCI_BUS_ID; on identical GPUs ties fall back to bus order.
    """
    if vendor != "nvidia" or mask.masked:
        return None
    order = env.get("CUDA_DEVICE_ORDER", "").strip().upper()
    if order == "PCI_BUS_ID":
        return None
    if order == "FASTEST_FIRST":
        return (
            "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order, "
            "so which one it picked cannot be told"
        )
    if len({g.name for g in gpus if g.vendor == "nvidia"}) > 1:
        return (
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which "
            "GPU it picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    return None


def _llama_gpus(launch: _Launch, env: Mapping[str, str], visible: _Visible) -> _Intent:
    """llama.cpp's device list (-dev), then -sm none's one main GPU (-mg) of it."""
    devices: list[tuple[str, int]] = []
    device = _get(_DEVICE, launch, env)
    if device is not None:
        for name in (n.strip() for n in device[1].split(",")):
            found = _RUNTIME_DEVICE.fullmatch(name.lower())
            if found is None:
                return _Intent(
                    unknown=f"{device[0]} names {name}, whose number is not a CUDA or ROCm "
                    "device number; place this shard in a shards file"
                )
            vendor = "nvidia" if found[1] == "cuda" else "amd"
            runtime = visible.vendor(vendor)
            if isinstance(runtime, str):
                return _Intent(unknown=runtime)
            position = int(found[2])
            if position >= len(runtime):
                return _Intent(
                    unknown=f"{device[0]} names {name}, but only {len(runtime)} "
                    f"{_VENDOR_NAMES[vendor]} GPU(s) are visible to it"
                )
            devices.append((vendor, runtime[position]))
    else:
        everything = visible.everything()
        if everything.unknown is not None:
            return everything
        devices = [(v, i) for v in _VENDORS for i in visible.lists.get(v, ())]
    split = _get(_SPLIT_MODE, launch, env)
    if split is not None and _split_none(split[1]):
        main = _get(_MAIN_GPU, launch, env)
        index = _int(main[1]) if main is not None else 0
        if len({v for v, _ in devices}) > 1:
            return _Intent(
                unknown=f"{split[0]} on NVIDIA and AMD GPUs: which is its first device "
                "depends on the build"
            )
        if index is None or not 0 <= index < len(devices):
            return _Intent(
                unknown=f"{split[0]} with {main[0] if main else 'main GPU 0'}, but it sees "
                f"{len(devices)} GPU(s)"
            )
        devices = [devices[index]]
    for vendor in dict.fromkeys(v for v, _ in devices):
        problem = visible.check_order(vendor, [i for v, i in devices if v == vendor])
        if problem is not None:
            return _Intent(unknown=problem)
    return _Intent(gpus=tuple(sorted({i for _, i in devices})))


def _vllm_gpus(launch: _Launch, visible: _Visible) -> _Intent:
    """vLLM takes the first tensor x pipeline x local data parallel visible GPUs."""
    platforms = [v for v in _VENDORS if visible.lists.get(v) or v in visible.problems]
    if len(platforms) > 1:
        return _Intent(
            unknown="vLLM runs on one platform and both NVIDIA and AMD GPUs are visible to it; "
            "set CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES to the ones it should use"
        )
    if not platforms:
        return _Intent()
    vendor = platforms[0]
    runtime = visible.vendor(vendor)
    if isinstance(runtime, str):
        return _Intent(unknown=runtime)
    count = 1
    for names in (
        {"--tensor-parallel-size", "-tp"},
        {"--pipeline-parallel-size", "-pp"},
    ):
        found = _flag(launch.args, names)
        count *= max(1, _int(found[1]) or 1) if found else 1
    local = _flag(launch.args, {"--data-parallel-size-local", "-dpl"}) or _flag(
        launch.args, {"--data-parallel-size", "-dp"}
    )
    count *= max(1, _int(local[1]) or 1) if local else 1
    chosen = runtime[:count]
    problem = visible.check_order(vendor, chosen)
    if problem is not None:
        return _Intent(unknown=problem)
    return _Intent(gpus=tuple(sorted(chosen)))
