"""A /proc in a folder, holding what the DRM usage stats need: each process's fd/N (a link
to its target, as the kernel shows it) and fdinfo/N (the driver's text), for
worker/gpu/drm_fdinfo to read as it reads the node's own /proc."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "drm-fdinfo"
RENDER = "/dev/dri/renderD128"


def fdinfo(name: str, **replace: str) -> str:
    """A fixture's text, with `key=value` lines replaced (client_id="7" sets drm-client-id)."""
    lines = []
    for line in (FIXTURES / name).read_text().splitlines():
        key = line.partition(":")[0].strip().removeprefix("drm-").replace("-", "_")
        lines.append(f"{line.partition(':')[0]}:\t{replace[key]}" if key in replace else line)
    return "\n".join(lines) + "\n"


def add_process(
    root: Path, pid: int, files: Mapping[int, tuple[str, str]], other_fds: int = 0
) -> Path:
    """Process `pid` under `root`, holding descriptor N -> (link target, fdinfo text), and
    `other_fds` descriptors of ordinary files after them."""
    (root / str(pid) / "fd").mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "fdinfo").mkdir(exist_ok=True)
    for fd, (target, text) in files.items():
        os.symlink(target, root / str(pid) / "fd" / str(fd))
        (root / str(pid) / "fdinfo" / str(fd)).write_text(text)
    start = max(files, default=2) + 1
    for fd in range(start, start + other_fds):
        os.symlink("/var/log/engine.log", root / str(pid) / "fd" / str(fd))
        (root / str(pid) / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t02\n")
    return root
