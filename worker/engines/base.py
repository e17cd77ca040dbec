"""What an engine folder gives: the `Engine` protocol, and the values it works with.

An engine says how to recognise its process and arguments (`launch`), which GPUs its flags
pick (`gpus`) and which of its flags keep it on the CPU (`cpu_flag`), where its output goes
first (`outputs`), how its processes make shards (`children_join_parent`, `served_model`),
what its log lines mean (`log()`) and what they say of its requests (`requests()`), both
imported when a log is first read: the patterns take as long to compile as the rest of a
node's start. What a verdict or doctor says of it that no other engine shares is its own too
(`cpu_only_build_fix`, `layers_flag`, `lists_devices`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from .flags import Dialect

if TYPE_CHECKING:
    from .evidence.state import EvidenceState
    from .visible import Visible

STDOUT, STDERR = 1, 2


@dataclass(frozen=True)
class Launch:
    """What the command line alone says: which engine, and its own arguments."""

    engine: str
    name: str
    """The id's stem: "llama-server", "ollama-runner", "vllm"..."""
    args: tuple[str, ...]
    """The engine's arguments, after the executable, module or subcommand."""
    dialect: Dialect
    """Whose flags these are."""
    serves: bool = False
    """Whether it answers HTTP on a port (llama-cli and batch jobs do not)."""
    default_port: int | None = None
    """The port it serves on without a --port flag."""
    health: bool = False
    """Whether GET /health answers 2xx only once the model is loaded."""
    router: bool = False
    """It loads no model itself and starts one child process per model (llama-server's
    router mode, Ollama's server): each child is a shard, the router none."""
    child_prefix: bool = False
    """A router whose children's lines carry `[PORT]` in its log (llama-server's); Ollama's
    server copies them as they are."""
    binds_all: bool = False
    """Without a host flag it listens on every address (vLLM's API server); the others on
    loopback."""


@dataclass(frozen=True)
class Server:
    """A router process that says what its models are (`Engine.reports`), and the loopback
    port it answers on, one it listens on itself."""

    engine: str
    pid: int
    host: str
    """"127.0.0.1" or "::1"."""
    port: int


GIB = 1 << 30


@dataclass(frozen=True)
class ModelClaim:
    """What an engine's server says of one model it runs: its size and how much of it the
    server put in GPU memory (Ollama's /api/ps, which `ollama ps` prints as "100% GPU" or
    "48%/52% CPU/GPU"). The server's plan and belief, not proof: Ollama has said 100% GPU
    while no VRAM was used (ollama#12722) and while the CPU ran the model (ollama#17833)."""

    source: str
    """Who says it, as a reason names it: "Ollama's /api/ps"."""
    size: int
    gpu_bytes: int

    @property
    def where(self) -> Literal["gpu", "part", "cpu"]:
        if self.gpu_bytes <= 0:
            return "cpu"
        return "gpu" if self.gpu_bytes >= self.size else "part"

    def said(self) -> str:
        """As `ollama ps` says it, with the sizes: "100% GPU (5.6 GiB of 5.6 GiB in GPU
        memory)"."""
        share = round(100 * min(self.gpu_bytes, self.size) / self.size) if self.size > 0 else 0
        split = {"gpu": "100% GPU", "cpu": "100% CPU"}.get(
            self.where, f"{100 - share}%/{share}% CPU/GPU"
        )
        return (
            f"{split} ({self.gpu_bytes / GIB:.1f} GiB of {self.size / GIB:.1f} GiB in GPU memory)"
        )


@dataclass(frozen=True)
class Intent:
    """The GPUs an engine meant to use, or why they cannot be told, or what says the CPU."""

    gpus: tuple[int, ...] = ()
    unknown: str | None = None
    """Why the GPUs cannot be told; `gpus` means nothing when set."""
    cpu: str | None = None
    """What says the engine was meant for the CPU, as written ("-ngl 0")."""
    gpu_request: str | None = None
    """What asks for GPUs ("-ngl 99"), set when no GPU tool answered to say which GPUs there
    are: `unknown` says so, and the engine's own word may still tell that it runs on the CPU."""


@dataclass(frozen=True)
class RequestLine:
    """What one line of an engine's log says of a request (evidence/serving.py keeps them in
    time)."""

    kind: Literal["start", "end", "done"]
    """`start`: a request starts on `slot`; `end`: the one on `slot` ended; `done`: one that
    ran `busy_s` seconds ended as the line was written (a line logged once a request is over)."""
    slot: int = 0
    busy_s: float | None = None
    """How long the engine itself says it took (needed for `done`)."""


class RequestLog(Protocol):
    """What an engine's log lines say of the requests it runs."""

    @property
    def word(self) -> str:
        """A word every such line holds (a cheap test first)."""
        ...

    def read(self, line: str) -> RequestLine | None:
        """What the raw line says of a request; None for any other line. Never raises."""
        ...


class EngineLog(Protocol):
    """What an engine's log lines mean."""

    @property
    def banner(self) -> re.Pattern[str]:
        """The line it prints once per start (lives.py)."""
        ...

    @property
    def before(self) -> re.Pattern[str] | None:
        """Lines it prints before its banner, matched on the cleaned line."""
        ...

    @property
    def words(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Lowercase words every banner line, and every line before one, holds (a cheap
        test)."""
        ...

    @property
    def keywords(self) -> tuple[str, ...]:
        """Lowercase words every line its reader takes holds one of (a cheap test first)."""
        ...

    @property
    def prefixes(self) -> tuple[str, ...]:
        """Patterns of what it puts before its lines (a level, a time, a source line), taken
        off by clean.py with everyone's."""
        ...

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        """A line in its format: the engine that said it, and whether it is a finding; None
        for a line in another format. `text` is the line cleaned, `low` the raw lowercased."""
        ...

    def replaces(self, line: str, previous: str) -> bool:
        """Whether the finding `line` only brings the kept line before it up to date, so it
        takes that one's place among the lines kept (one line per layer, on one device)."""
        ...

    def listed_device(self, line: str) -> tuple[str, str] | None:
        """A line of the list of devices its build prints (`lists_devices`): the device and
        what it is; None for any other line."""
        ...


class ServerReports(Protocol):
    """What an engine's router server says of the models it runs, asked on loopback. Anyone on
    the node can run a process of that name, so what it answers is read as hostile input: only
    a shard's own router is asked, on a port it listens on itself, by a deadline, a bounded
    answer."""

    def address(self, pid: int) -> tuple[str, int] | None:
        """The loopback address and port the server process `pid` listens on; None where it
        listens on none."""
        ...

    def model_name(self, server: Server, launch: Launch, deadline: float) -> str | None:
        """The name the server knows the model of its child `launch` by; None where it did not
        say by `deadline` (time.monotonic())."""
        ...

    def claims(self, server: Server, deadline: float) -> Mapping[str, ModelClaim] | None:
        """What it says of each model it runs, by name; None where it did not answer by
        `deadline`."""
        ...


class Engine(Protocol):
    """One engine: its folder's `ENGINE`, listed in registry.py."""

    name: str
    """As a ComputeStatus names it: "llama.cpp", "ollama", "vllm", "sglang"."""
    outputs: tuple[int, int]
    """Its output descriptors in the order its log is looked for (STDERR first for most)."""
    owns_log: bool
    """Whether the shard's process writes its log, so that a new pid is a new life of it
    (lives.py); False where processes come and go within one server's log (Ollama's
    runners)."""
    hosts_other_engines: bool
    """Its log carries another engine's lines (Ollama's server log, its runners' llama.cpp
    lines): a finding of its own names the log's engine whatever was read before it."""
    children_join_parent: bool
    """A process of it whose ancestor runs it too is part of that ancestor's shard, whatever
    its command line (vLLM's API servers, engine cores and workers); where False, only a
    fork that kept its parent's command line is."""
    layers_flag: str | None
    """Its flag for the layers it puts on GPUs, as advice names it; None where it has none a
    person sets (its advice is then about its GPU backend alone)."""
    lists_devices: bool
    """Its builds answer `--list-devices` with the GPUs they can use, loading no model:
    doctor's pre-flight asks those of its shards."""

    def launch(self, exe: str, args: tuple[str, ...]) -> Launch | None:
        """Its process, from the executable's name (lowercased, no folder) and arguments."""
        ...

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        """Its process run by Python: `python -m module ...` or `python script ...`."""
        ...

    def settle(self, launch: Launch, env: Mapping[str, str] | None) -> Launch:
        """What it runs once its environment `env` is read (None: it may not be), where a
        variable changes what its command line says (llama-server's LLAMA_ARG_MODELS_DIR
        makes a router); `launch` itself where none does."""
        ...

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        """Its own flag (or variable) that keeps the model on the CPU, as written."""
        ...

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        """The GPUs its flags pick from those visible to it."""
        ...

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        """What asks for GPUs, as written, for a node whose GPU tools did not say which."""
        ...

    def served_model(self, launch: Launch) -> str | None:
        """The model one of its processes serves, which names it as a shard where a router
        started it (`<router's id>/<model>`); None where it says none."""
        ...

    def router_child(self, router: Launch, argv0: str, launch: Launch) -> Launch | None:
        """What a process its router `router` started runs, its command line read as `launch`
        (`argv0` its path as run): that, its own reading of it, or None where it is none of
        the router's models (Ollama's discovery probes)."""
        ...

    def reports(self) -> ServerReports | None:
        """What its router says of its models (Ollama's /api/ps); None where it says
        nothing."""
        ...

    def cpu_only_build_fix(self, backend: str | None) -> str | None:
        """What to run instead of a build of it without GPU support (`cpu_only_build`), for
        GPUs of the backend `backend` ("ROCm"; any other: CUDA's), or for either where no
        GPU tool said which GPUs there are (None); None where it has no advice of its own."""
        ...

    def log(self) -> EngineLog:
        """What its log lines mean (imported when first asked)."""
        ...

    def requests(self) -> RequestLog | None:
        """What its log lines say of its requests (imported when first asked); None where its
        log shows none."""
        ...
