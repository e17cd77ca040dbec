"""Each process's use of each GPU, from the DRM usage stats in /proc/PID/fdinfo.

Every DRM driver that writes the usage stats (amdgpu, i915, xe, and others; parse.py)
tells, in the fdinfo of each open GPU file, the device (`drm-pdev`, its PCI address), the
client (`drm-client-id`), its memory per region and its engines' busy time. This reads
them for every process, without a tool, and puts them on the GPUs with that bus id.

- One client counts once: a descriptor duplicated, inherited or passed to another process
  shows the same client id on the same device. Its use goes to the lowest pid holding it.
- Memory is the device's own (i915 `local0`, xe `vram0`/`vram1`, amdgpu `vram`: what KFD's
  `vram_<gpu_id>` counts too); an integrated GPU, with no such region, has the rest (`gtt`,
  `system`). On amdgpu, ROCm's allocations are in the fdinfo of the render node ROCr opens,
  so KFD and fdinfo agree; a Vulkan process, which never opens /dev/kfd, is only here.
- Busy time counts only where the driver schedules the work. i915 and xe do all of it: a
  0 there is an idle engine. amdgpu does not schedule HIP/ROCm compute, which runs on KFD's
  user-mode queues (ROCm/amdsmi#130): a process computing flat out reads 0 ns, so on amdgpu
  (and any other driver) a 0 is no reading, and only Vulkan's work shows.

What a process holds is its user's to shape, and the worker runs as root: a descriptor's
target is only read as a link (os.readlink, never opened), only those to a /dev/dri card
or render node count, fdinfo files are opened without following links, and reads are
bounded (MAX_FDS descriptors a process, MAX_DESCRIPTORS in all, MAX_FDINFO_BYTES a file,
MAX_PROCESSES). A descriptor's link, once read, is not read again while its process runs,
but for a full read every RELINK_EVERY reads: most of a read's cost is links.
A process that exits while it is read is skipped. A holder that could not be read whole
(another /proc's process the worker may not read, a process past a bound) leaves every
DRM GPU's foreign memory unknown: its memory cannot be told apart from a shard's.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from placewatch.schemas import GpuProcess, GpuSample

from ..process_activity import clamp_pct
from .parse import DrmClient, parse_fdinfo

PROC_ROOT = Path("/proc")
MAX_PROCESSES = 65536
MAX_FDS = 4096
"""Descriptors looked at in one process: an engine holds a few hundred; past it, the
process's GPU files may go unread (said as foreign memory unknown)."""
MAX_DESCRIPTORS = 65536
"""Descriptors looked at in one read, all processes together: each is a readlink of a few
µs (docs/benchmarks.md); past it, the read stops and says so."""
RELINK_EVERY = 15
"""Every descriptor's link is read again each this many reads; in between, only those of
descriptors not seen before (an engine's stay open): a GPU file opened under the number of
a file closed since is seen at the latest then (30 s at the 2 s interval)."""
MAX_FDINFO_BYTES = 16384
"""An fdinfo file read at most: amdgpu's and xe's are under 2 KiB."""
DRM_VENDORS = ("amd", "intel")
"""Vendors whose drivers write the usage stats (NVIDIA's does not)."""

SCHEDULES_ALL = frozenset({"i915", "xe"})
"""Drivers that schedule every piece of a client's GPU work: a 0 there is idle."""
COMPUTE_ENGINES = frozenset({"render", "compute", "rcs", "ccs", "gfx"})
"""Engines that run kernels and shaders (i915, xe, amdgpu names); copy and video do not."""

_DRI = re.compile(r"/dev/dri/(card|renderD)\d{1,6}")

Key = tuple[str, int]
"""(PCI address, client id): one DRM client."""
Links = dict[tuple[int, int], dict[str, bool]]
"""(pid, inode of its fd folder) -> descriptor -> whether it is a GPU card or render node."""


@dataclass(frozen=True)
class DrmReading:
    """Every DRM client on the node, deduplicated, with the pid it is counted for."""

    clients: dict[Key, tuple[int, DrmClient]]
    unread: str | None = None
    """Why a holder of a GPU may have gone unread; None: every process was read whole."""
    links: Links = field(default_factory=dict)
    """What each descriptor read was: for the next read."""


@dataclass(frozen=True)
class ProcessUse:
    """What one process holds and ran on one GPU."""

    pid: int
    pdev: str
    memory_bytes: int | None
    busy_pct: float | None


def _open_dir(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def _read_bounded(name: str, dir_fd: int) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, MAX_FDINFO_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _dri_descriptors(
    fd_dir: int, max_fds: int, known: dict[str, bool]
) -> tuple[dict[str, bool], int]:
    """Each descriptor of a process (up to `max_fds`) -> whether its link is a /dev/dri card
    or render node, each link read relative to its folder (a path walk of /proc/PID/fd a
    link costs as much as the read) unless `known` says; how many it holds, up to
    `max_fds` + 1."""
    with os.scandir(fd_dir) as entries:
        names = [e.name for _, e in zip(range(max_fds + 1), entries, strict=False)]
    links = {}
    for name in names[:max_fds]:
        if name in known:
            links[name] = known[name]
            continue
        try:
            target = os.readlink(name, dir_fd=fd_dir)
        except OSError:
            continue  # closed since
        links[name] = target.startswith("/dev/dri/") and bool(_DRI.fullmatch(target))
    return links, len(names)


def _clients(fdinfo_dir: int, names: list[str]) -> list[DrmClient]:
    found = []
    for name in names:
        data = _read_bounded(name, fdinfo_dir)
        if data is None or len(data) > MAX_FDINFO_BYTES:
            continue
        client = parse_fdinfo(data.decode("utf-8", errors="replace"))
        if client is not None and client.pdev is not None and client.client_id is not None:
            found.append(client)
    return found


def read_process(
    root: str,
    pid: int,
    max_fds: int = MAX_FDS,
    links: Links | None = None,
    kept: Links | None = None,
) -> tuple[list[DrmClient], str | None, int]:
    """The DRM clients of one process, why it was not read whole (None: it was), and how
    many descriptors were looked at. `links`: what an earlier read found each descriptor
    to be; `kept`: where this read puts what it found."""
    try:
        fd_dir = _open_dir(f"{root}/{pid}/fd")
    except FileNotFoundError:
        return [], None, 0  # exited
    except OSError as exc:
        return [], f"pid {pid}'s descriptors could not be read ({exc.strerror})", 0
    try:
        # A new process under a reused pid has a new folder, with another inode.
        key = (pid, os.fstat(fd_dir).st_ino)
        found_links, held = _dri_descriptors(fd_dir, max_fds, (links or {}).get(key, {}))
    except OSError:
        return [], None, 0  # exited while its folder was listed
    finally:
        os.close(fd_dir)
    if kept is not None:
        kept[key] = found_links
    names = [name for name, dri in found_links.items() if dri]
    found: list[DrmClient] = []
    if names:
        try:
            fdinfo_dir = _open_dir(f"{root}/{pid}/fdinfo")
        except OSError:
            return [], None, held
        try:
            found = _clients(fdinfo_dir, names)
        finally:
            os.close(fdinfo_dir)
    over = f"pid {pid} holds more than {max_fds} descriptors" if held > max_fds else None
    return found, over, min(held, max_fds)


def read_fdinfo(
    root: Path | str = PROC_ROOT,
    max_fds: int = MAX_FDS,
    budget: int = MAX_DESCRIPTORS,
    links: Links | None = None,
) -> DrmReading:
    """Every process's DRM clients under `root`, looking at `budget` descriptors at most in
    all; with `links`, what an earlier read found each descriptor to be. Never raises."""
    clients: dict[Key, tuple[int, DrmClient]] = {}
    unread: str | None = None
    kept: Links = {}
    try:
        names = os.listdir(root)
    except OSError as exc:
        return DrmReading({}, f"{root} could not be listed ({exc.strerror})", {})
    pids = sorted(int(n) for n in names if n.isascii() and n.isdigit() and len(n) < 10)
    if len(pids) > MAX_PROCESSES:
        unread = f"more than {MAX_PROCESSES} processes"
    left = budget
    for pid in pids[:MAX_PROCESSES]:
        if left <= 0:
            unread = unread or f"more than {budget} descriptors on the node"
            break
        found, why, looked = read_process(str(root), pid, min(max_fds, left), links, kept)
        left -= looked
        unread = unread or why
        for client in found:
            assert client.pdev is not None and client.client_id is not None
            clients.setdefault((client.pdev, client.client_id), (pid, client))
    return DrmReading(clients, unread, kept)


def device_bytes(client: DrmClient) -> int | None:
    """The bytes a client holds in the device's own memory; on an integrated GPU (no VRAM
    region), in every region but stolen memory."""
    local = [v for r, v in client.memory.items() if re.fullmatch(r"(vram|local)\d*", r)]
    if local:
        return sum(local)
    rest = [v for r, v in client.memory.items() if not r.startswith("stolen")]
    return sum(rest) if rest else None


def _engine_pct(now: DrmClient, then: DrmClient, elapsed_s: float) -> float | None:
    """The busiest compute engine's share of the time between two reads of one client."""
    shares: list[float] = []
    for name in COMPUTE_ENGINES:
        capacity = now.capacity.get(name, 1)
        if name in now.engine_ns and name in then.engine_ns and elapsed_s > 0:
            busy = now.engine_ns[name] - then.engine_ns[name]
            shares.append(busy / (elapsed_s * 1e9) / capacity)
        elif name in now.cycles and name in then.cycles:
            busy = now.cycles[name] - then.cycles[name]
            if name in now.total_cycles and name in then.total_cycles:
                span = now.total_cycles[name] - then.total_cycles[name]
            else:
                span = int(now.maxfreq_hz.get(name, 0) * elapsed_s)
            if span > 0:
                shares.append(busy / span / capacity)
    if not shares or min(shares) < 0:
        return None  # nothing to compare, or a counter went back (read again next time)
    busiest = max(shares) * 100
    if busiest == 0 and now.driver not in SCHEDULES_ALL:
        return None
    return busiest


def _went_back(now: DrmClient, then: DrmClient) -> bool:
    return any(v < then.engine_ns.get(k, 0) for k, v in now.engine_ns.items()) or any(
        v < then.cycles.get(k, 0) for k, v in now.cycles.items()
    )


class DrmUsage:
    """Reads of the node's DRM clients, each compared with the last to give busy time."""

    def __init__(
        self, root: Path | str = PROC_ROOT, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = Path(root)
        self._clock = clock
        self._last: dict[Key, tuple[float, DrmClient]] = {}
        self._links: Links = {}
        self._reads = 0

    def read(self) -> tuple[list[ProcessUse], str | None]:
        """Each process's use of each GPU, summed over its clients; why a holder may have
        gone unread (None: none did). Blocking: run it in a thread."""
        self._reads += 1
        reading = read_fdinfo(self.root, links=self._links if self._reads % RELINK_EVERY else {})
        self._links = reading.links
        now = self._clock()
        last, self._last = self._last, {}
        per_pid: dict[tuple[int, str], list[tuple[int | None, float | None]]] = {}
        for key, (pid, client) in reading.clients.items():
            before = last.get(key)
            busy = None if before is None else _engine_pct(client, before[1], now - before[0])
            # A counter that went back is read against the larger value it had (the spec's
            # rule); every other read is the next one's baseline.
            kept = before is not None and _went_back(client, before[1])
            self._last[key] = before if kept and before is not None else (now, client)
            per_pid.setdefault((pid, key[0]), []).append((device_bytes(client), busy))
        uses = [
            ProcessUse(pid, pdev, _bytes([m for m, _ in held]), _pct([b for _, b in held]))
            for (pid, pdev), held in sorted(per_pid.items())
        ]
        return uses, reading.unread


def _bytes(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _pct(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def attach_drm_processes(gpus: list[GpuSample], uses: list[ProcessUse]) -> list[GpuSample]:
    """Each AMD and Intel GPU with the processes fdinfo finds on it, by bus id. A process
    its source listed already keeps what the source said, and gains what it left unsaid;
    one it did not list is added where it holds memory there or ran there."""
    by_pdev: dict[str, list[ProcessUse]] = {}
    for use in uses:
        by_pdev.setdefault(use.pdev, []).append(use)
    out = []
    for gpu in gpus:
        bus = (gpu.bus_id or "").strip().lower()
        found = by_pdev.get(bus, []) if gpu.vendor in DRM_VENDORS else []
        if not found:
            out.append(gpu)
            continue
        listed = {p.pid: p for p in gpu.processes}
        processes = list(gpu.processes)
        for use in found:
            sm = clamp_pct(use.busy_pct)
            if use.pid in listed:
                p = listed[use.pid]
                used = use.memory_bytes if p.used_bytes is None else p.used_bytes
                processes[processes.index(p)] = msgspec.structs.replace(
                    p, used_bytes=used, sm_pct=sm if p.sm_pct is None else p.sm_pct
                )
            elif use.memory_bytes or use.busy_pct:
                processes.append(GpuProcess(pid=use.pid, used_bytes=use.memory_bytes, sm_pct=sm))
        out.append(msgspec.structs.replace(gpu, processes=processes))
    return out
