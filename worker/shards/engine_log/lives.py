"""Where one process life of an engine starts in its log.

A log is often appended to by one run of the engine after another (`llama-server ... >> s.log
2>&1`, a service restarted into its file, a worker that starts after several restarts).
What an earlier run said is not what the running one says: a CPU build's "no usable GPU
found" followed by a GPU build's full offload is a GPU shard. So the evidence starts afresh
at each startup banner, the line an engine prints once per start:

- llama.cpp: `llama_server: initializing` (2025 on, b11434's first timestamped line),
  `build: N (commit)` (its common `print_build_info`, 2023 to 2025), `main: build = N` (2023);
- Ollama: `msg="Listening on ..."` (the server; its runners come and go within one life);
- vLLM: `vLLM API server version X`.

Some lines come before the banner and belong to the run it starts: llama.cpp's argument
warnings (`warning: no usable GPU found, ...`, printed while it parses its flags), its GPU
backends' init lines (`ggml_cuda_init: found 1 CUDA devices`, `  Device 0: ...`,
`load_backend: ...`) and vLLM's platform detection (logged from `vllm/platforms/__init__.py`
before the server starts). Such lines read since the last finding of another kind are read
again into the life the banner starts.
"""

from __future__ import annotations

import re
from typing import Literal

from .clean import clean_line

LifeLine = Literal["banner", "before"]
MAX_BEFORE = 256
"""The most lines kept from before a banner (a node of 16 GPUs prints two a GPU)."""

_BANNER = re.compile(
    r"llama_server: initializing\b|(?:^|\s)build: \d{1,7} \(|\bmain: build = \d"
    r"|msg=\"?Listening on\b|\bvLLM API server version\b"
)
_BANNER_WORDS = ("initializing", "build", "listening", "server version")
_BEFORE = re.compile(
    r"^(?:warn(?:ing)?: |Log start$|ggml_(?:init_cublas|cuda|vulkan|sycl|metal|opencl|hip)\w*:"
    r"|load_backend:"
    r"|register_backend:|register_device:|Device \d{1,3}:|Using device \d"
    r"|(?:Checking if|Automatically detected|No platform detected|Platform plugin)"
    r"|The vLLM package was not found|.*\bplatform is (?:not )?available)"
)
_BEFORE_WORDS = ("warn", "log start", "ggml_", "backend", "device", "platform", "vllm package")


def life_line(line: str, low: str) -> LifeLine | None:
    """Whether a raw line starts a process life ("banner"), may come just before the banner
    of one ("before"), or neither. `low` is the line lowercased."""
    if any(w in low for w in _BANNER_WORDS) and _BANNER.search(line):
        return "banner"
    if any(w in low for w in _BEFORE_WORDS) and _BEFORE.match(clean_line(line)):
        return "before"
    return None


class Lives:
    """Tells where each process life starts in a log read line by line.

    `see(line, low)` returns the lines to read into a fresh evidence when `line` starts a
    life (the lines before its banner, then the banner), else None; `settled()` says a line
    of another kind was a finding, which ends the lines kept; `starts` counts the banners
    seen."""

    def __init__(self) -> None:
        self.starts = 0
        self._before: list[str] = []
        self._kept = False

    def see(self, line: str, low: str) -> list[str] | None:
        found = life_line(line, low)
        if found == "banner":
            replay, self._before = [*self._before, line], []
            self.starts += 1
            return replay
        if found == "before":
            self._before.append(line)
            del self._before[:-MAX_BEFORE]
            self._kept = True
        else:
            self._kept = False
        return None

    def new_file(self) -> None:
        """The log was truncated or replaced: what was kept was the last file's."""
        self._before.clear()

    def settled(self) -> None:
        """The line just seen was a finding; unless it may come before a banner, what was
        kept belongs to the life it is part of."""
        if not self._kept:
            self._before.clear()
