"""Where the worker's RSS comes from: this interpreter's RSS after each stage of its start.

The stages are the ones `placewatch run` goes through: the interpreter alone,
asyncio (which imports ssl, and with it OpenSSL), the worker's dependencies,
its command line, nvidia-ml-py, and, where the driver's NVML loads,
`nvmlInit` and a first read of the GPUs. Each line gives the RSS and its two
parts: anonymous (the process's own memory) and mapped files (shared
libraries, the interpreter). The stages are measured in this script's own
process, in import order, so it imports nothing of the worker's before them.
Where NVML loads, a last line adds what `nvmlInit` took to what the stack
alone (the interpreter, asyncio and the four dependencies) holds: the least
any worker built on them can hold while it reads NVML.

    python bench/rss_stages.py
"""

from __future__ import annotations

import importlib
import site
import sys
from pathlib import Path

MIB = 1 << 20


def rss(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of a process (this one by default), in MiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            found[key] = int(value.split()[0]) * 1024 / MIB
    return found


def show(stage: str, before: dict[str, float] | None = None) -> dict[str, float]:
    now = rss()
    grew = f"{now['VmRSS'] - before['VmRSS']:+7.1f}" if before else " " * 7
    print(
        f"{stage:<44}{now['VmRSS']:>7.1f}{grew}{now['RssAnon']:>11.1f}{now['RssFile']:>8.1f}"
        f"{len(sys.modules):>9}"
    )
    return now


def startup_pth() -> list[str]:
    """The .pth files of this interpreter's site directories that import a module at start:
    what each of them imports is in every process of the interpreter."""
    found = []
    for where in sorted({*site.getsitepackages(), site.getusersitepackages()}):
        for pth in sorted(Path(where).glob("*.pth")):
            lines = pth.read_text(errors="replace").splitlines()
            if any(line.startswith(("import ", "import\t")) for line in lines):
                found.append(pth.name)
    return found


def main() -> None:
    print(f"Python {sys.version.split()[0]} at {sys.executable}")
    print(f"site .pth files that import at its start: {', '.join(startup_pth()) or 'none'}")
    print(f"{'stage':<44}{'RSS MiB':>7}{'grew':>7}{'anonymous':>11}{'files':>8}{'modules':>9}")
    last = show("interpreter")
    stack = last
    for stage, modules in (
        ("asyncio (and ssl)", ["asyncio"]),
        ("anyio, msgspec, nats-py, psutil", ["anyio", "msgspec", "nats", "psutil"]),
        ("the worker's command line", ["placewatch.cli"]),
        ("nvidia-ml-py", ["pynvml"]),
    ):
        for name in modules:
            importlib.import_module(name)
        last = show(stage, last)
        if "nats" in modules:
            stack = last  # all a worker on this stack holds before any code of its own

    import pynvml

    from placewatch.worker.gpu import nvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"no NVML here ({exc}): the stages that need a driver are left out")
        return
    before, last = last, show("nvmlInit", last)
    least = stack["VmRSS"] + last["VmRSS"] - before["VmRSS"]
    mapped = sorted(
        {
            Path(line.split()[-1]).name
            for line in Path("/proc/self/maps").read_text().splitlines()
            if "libnvidia-ml" in line or "libcuda" in line
        }
    )
    gpus, errors = nvml.read_gpus(pynvml)
    show(f"a first read ({len(gpus)} GPUs{', errors' if errors else ''})", last)
    print(f"driver libraries mapped: {', '.join(mapped)}")
    print(
        f"the least any worker on this stack reading NVML holds: {stack['VmRSS']:.1f} MiB "
        f"before its own code, and nvmlInit's {least - stack['VmRSS']:.1f}: {least:.1f} MiB"
    )


if __name__ == "__main__":
    main()
