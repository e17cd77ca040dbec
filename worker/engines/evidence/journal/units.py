"""Which systemd unit a process runs as, from its cgroup, when journald keeps its output.

systemd puts each service's processes in the cgroup named after it: on cgroup v2 `0::/system.
slice/ollama.service` (a unit in a slice of its own, `/system.slice/foo.slice/x.service`, too);
on v1 and hybrid hosts the `name=systemd` line names it. journald files the output of a
service whose stdout is its socket under `_SYSTEMD_UNIT=` that unit. A service under a user's
manager (`user@1000.service/app.slice/x.service`) logs to that user's journal and is filed
under `_SYSTEMD_USER_UNIT`: it is not read. Only root creates cgroups outside a user's manager,
so a unit named there is one systemd runs.
"""

from __future__ import annotations

import re

_UNIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.@\\-]{0,240}\.service")
"""A service's name as systemd allows it (systemd.unit(5)): letters, digits, `:-_.@\\`."""


def valid_unit(unit: str) -> bool:
    """Whether `unit` is a service's name (so no argument journalctl could take otherwise)."""
    return _UNIT.fullmatch(unit) is not None


def unit_of(cgroup: str) -> str | None:
    """The system service that /proc/PID/cgroup's text puts the process in, or None (a scope,
    a container, a user's service, no systemd)."""
    for line in cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers not in ("", "name=systemd"):
            continue
        segments = path.strip().split("/")
        if any(s.startswith("user@") for s in segments):
            return None
        services = [s for s in segments if s.endswith(".service")]
        if services and valid_unit(services[-1]):
            return services[-1]
    return None
