"""SGLang's log: `[time TP0] message` lines (its logging format), and what they say of where
it loads its model.

- The server's arguments are logged once per start and name the device it was given: as
  `server_args=ServerArgs(... device='cuda' ...)` (the dataclass's repr, to about 0.5), and
  since as a dict, `server_args={... 'device': 'cuda', ...}` (0.5.23,
  srt/entrypoints/engine.py). `cuda` is NVIDIA's and ROCm's torch alike.
- `Load weight end. type=..., dtype=..., avail mem=63.42 GB` (2024; later releases add
  `elapsed=` and `mem usage=15.10 GB.`) says its weights are loaded; on a GPU device the
  memory it used is the GPU's.
- The scheduler's `max_total_num_tokens=..., available_gpu_mem=10.21 GB` says where its KV
  pool went: `available_cpu_mem=` on the CPU (0.5.23, srt/managers/scheduler.py).
- Its line prefix: the time, then the process's ranks (` DP0`, ` PP1`, ` ATTN_CP0`,
  ` MOE_DP0`, ` TP1`, ` EP0`), ` TP<n>` only where there are several; a single-GPU run's lines
  carry none.

tests/fixtures/engine-logs/sglang/README.md names the source file and commit of each line.
"""

from __future__ import annotations

import re

from ...gpu.values import to_bytes
from ..evidence.rules import NUMBER, note_gpu_backend, note_on_cpu
from ..evidence.state import EngineBackend, EvidenceState

_PREFIX = (
    r"\[(?:\d{4}-)?(?:\d\d-\d\d )?\d\d:\d\d:\d\d(?:\.\d{1,6})?"
    r"(?: (?:DP|TP|PP|EP|ATTN_CP|MOE_DP)\d{1,4})*\]"
)
_LINE = re.compile(_PREFIX + " ")
_DEVICE = re.compile(r"\bdevice(?:='|': ')(\w{1,16})'")
_WEIGHTS = re.compile(rf"Load weight end\..*?\bmem usage=({NUMBER}) GB")
_KV_POOL = re.compile(r"^max_total_num_tokens=\d.*?\bavailable_(gpu|cpu)_mem=")
_GPU_DEVICES: dict[str, EngineBackend] = {"cuda": "CUDA", "hip": "ROCm", "xpu": "SYCL"}


def read_sglang_line(ev: EvidenceState, text: str) -> bool:
    if text.startswith(("server_args=ServerArgs(", "server_args={")):
        device = _DEVICE.search(text)
        if device is None:
            return False
        if device[1] == "cpu":
            note_on_cpu(ev)
        else:
            note_gpu_backend(ev, _GPU_DEVICES.get(device[1]), "hint")
        return True
    pool = _KV_POOL.search(text)
    if pool is not None:
        if pool[1] == "cpu":
            note_on_cpu(ev)
        else:  # any device but the CPU; the backend its arguments named, torch's cuda else
            note_gpu_backend(ev, ev.gpu_backend or "CUDA", "use")
        return True
    weights = _WEIGHTS.search(text)
    if weights is not None and ev.gpu_backend is not None:
        ev.gpu_weight_bytes = to_bytes(f"{weights[1]} GiB")  # SGLang's GB are 2**30 bytes
        return True
    return False


class _Log:
    """SGLang's logging lines."""

    banner = re.compile(r"\] server_args=(?:ServerArgs\(|\{)")
    before = None
    words = (("server_args",), ())
    keywords = ("server_args", "load weight", "available_")
    prefixes = (_PREFIX,)

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        return ("sglang", read_sglang_line(ev, text)) if _LINE.search(line) else None

    def replaces(self, line: str, previous: str) -> bool:
        return False

    def listed_device(self, line: str) -> tuple[str, str] | None:
        return None


LOG = _Log()
