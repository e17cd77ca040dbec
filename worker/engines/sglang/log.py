"""SGLang's log: `[time TP0] message` lines (its logging format), and what they say of where
it loads its model.

- `server_args=ServerArgs(...)` is logged once per start (its launcher's
  `logger.info(f"{server_args=}")`), and names the device it was given (`device='cuda'`).
- `Load weight end. type=..., dtype=..., avail mem=63.42 GB` (2024; later releases add
  `elapsed=` and `mem usage=15.10 GB.`) says its weights are loaded; on a GPU device the
  memory it used is the GPU's.

tests/fixtures/engine-logs/sglang/README.md names the source file and commit of each line.
"""

from __future__ import annotations

import re

from ...gpu.values import to_bytes
from ..evidence.rules import NUMBER, note_gpu_backend, note_on_cpu
from ..evidence.state import EngineBackend, EvidenceState

_LINE = re.compile(r"\[(?:\d{4}-)?(?:\d\d-\d\d )?\d\d:\d\d:\d\d(?: (?:DP|TP|PP|EP)\d{1,4})*\] ")
_DEVICE = re.compile(r"\bdevice='(\w{1,16})'")
_WEIGHTS = re.compile(rf"Load weight end\..*?\bmem usage=({NUMBER}) GB")
_GPU_DEVICES: dict[str, EngineBackend] = {"cuda": "CUDA", "hip": "ROCm", "xpu": "SYCL"}


def read_sglang_line(ev: EvidenceState, text: str) -> bool:
    if text.startswith("server_args=ServerArgs("):
        device = _DEVICE.search(text)
        if device is None:
            return False
        if device[1] == "cpu":
            note_on_cpu(ev)
        else:
            note_gpu_backend(ev, _GPU_DEVICES.get(device[1]), "hint")
        return True
    weights = _WEIGHTS.search(text)
    if weights is not None and ev.gpu_backend is not None:
        ev.gpu_weight_bytes = to_bytes(f"{weights[1]} GiB")  # SGLang's GB are 2**30 bytes
        return True
    return False


class _Log:
    """SGLang's logging lines."""

    banner = re.compile(r"\] server_args=ServerArgs\(")
    before = None
    words = (("server_args",), ())
    keywords = ("server_args", "load weight")
    prefixes = (r"\[(?:\d{4}-)?(?:\d\d-\d\d )?\d\d:\d\d:\d\d(?: (?:DP|TP|PP|EP)\d{1,4})*\]",)

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        return ("sglang", read_sglang_line(ev, text)) if _LINE.search(line) else None

    def replaces(self, line: str, previous: str) -> bool:
        return False

    def listed_device(self, line: str) -> tuple[str, str] | None:
        return None


LOG = _Log()
