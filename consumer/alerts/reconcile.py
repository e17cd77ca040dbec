"""Which alerts Alertmanager should hold, from each shard's latest status, and what to post
to get there: pure, no I/O.

Alertmanager keeps an alert firing for as long as it is posted again, and tells alerts
apart by their labels alone. So what it is told must follow what each shard does now,
not only the fallback events: the worker fires on entering a fallback verdict and
resolves on leaving, and a move from one fallback verdict to another (cpu_fallback to
misplaced) is only a ComputeStatus. Here the latest status of each shard decides, and
every message (a FallbackEvent or a ComputeStatus) is a reason to compare it with what
Alertmanager was last told.

The verdict is one of the alert's labels, so a changed verdict is a new alert: the POST
that says it ends the alert of the old verdict and fires the new one. Keeping the verdict
out of the labels would keep one alert, but its severity (critical for cpu_fallback,
warning for misplaced) is a label that routes read, and a label that changes makes a new
alert all the same; with the verdict a label, routes, silences and inhibitions can also
match on it, as they did before.

A status older than the one already held changes nothing: after a restart the compute
bucket says what is true now, and events still queued from before it are history. Older is
judged by when the server stored each (the stream's and the bucket's timestamps), not by the
node's clock: a node whose clock NTP steps back an hour still fires at once. Only a status
that comes without a stored time is judged by its `time`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from placewatch.schemas import FALLBACK_VERDICTS, ComputeStatus, FallbackEvent

ShardKey = tuple[str, str]
Message = FallbackEvent | ComputeStatus


@dataclass(frozen=True)
class Alert:
    """One alert as Alertmanager is to hold it: `verdict` is its label, `status` what the
    shard does now (its annotations say that), `ends` None while it fires."""

    status: ComputeStatus
    verdict: str
    starts: datetime
    ends: datetime | None = None


@dataclass(frozen=True)
class Firing:
    """A shard whose alert fires: the status it says and since when it fires."""

    status: ComputeStatus
    since: datetime

    def alert(self) -> Alert:
        return Alert(self.status, self.status.verdict, self.since)


@dataclass(frozen=True)
class Plan:
    """What to post for one shard, and what holds once Alertmanager took it."""

    key: ShardKey
    latest: ComputeStatus
    firing: Firing | None
    alerts: list[Alert] = field(default_factory=list)
    stored: float | None = None
    """When the server stored `latest` (seconds since the epoch), where known."""


Stamped = tuple[ComputeStatus, float | None]
"""A status with when the server stored it (seconds since the epoch; None where unknown)."""


def status_of(message: Message) -> ComputeStatus:
    return message.status if isinstance(message, FallbackEvent) else message


class AlertState:
    """Each shard's latest status and the alert Alertmanager holds for it."""

    def __init__(self) -> None:
        self.latest: dict[ShardKey, ComputeStatus] = {}
        self.firing: dict[ShardKey, Firing] = {}
        self.stored: dict[ShardKey, float | None] = {}
        """When the server stored each shard's latest status, where known."""
        self.known: set[ShardKey] = set()
        """Shards whose alert in Alertmanager is known: this process, or the messages it
        read again at start, said it. After a restart the others may hold an alert of any
        fallback verdict, so their first firing alert ends the other two."""

    def seed(self, statuses: Iterable[Stamped]) -> None:
        """Take the latest statuses the bus keeps (the compute bucket), each with when the
        server stored it; the newer wins."""
        for status, stored in statuses:
            key = (status.node, status.shard)
            if self._newer(key, status, stored):
                self.latest[key] = status
                self.stored[key] = stored

    def learn(self, message: Message, stored: float | None = None) -> None:
        """A message delivered before this process started: as if posted again."""
        self.commit(self.plan(message, stored))

    def plan(self, message: Message, stored: float | None = None) -> Plan:
        """What `message`, stored by the server at `stored`, changes, and the alerts that
        say it."""
        status = status_of(message)
        key = (status.node, status.shard)
        if self._newer(key, status, stored):
            now = status
        else:
            now, stored = self.latest[key], self.stored.get(key)
        plan = self._plan(key, now, stored, again=False)
        resolved = isinstance(message, FallbackEvent) and message.state == "resolved"
        if resolved and not plan.alerts and key not in self.known and plan.firing is None:
            # Its firing is not known (no longer in the stream): end whichever fired; an
            # alert that never fired notifies nobody.
            plan.alerts.extend(
                Alert(status, verdict, status.time, status.time)
                for verdict in sorted(FALLBACK_VERDICTS)
            )
        return plan

    def plan_all(self) -> list[Plan]:
        """At start: every firing alert, and an end for every alert that should not fire."""
        keys = sorted(set(self.latest) | set(self.firing))
        plans = (
            self._plan(key, self.latest[key], self.stored.get(key), again=True) for key in keys
        )
        return [p for p in plans if p.alerts]

    def commit(self, plan: Plan) -> None:
        """Alertmanager took `plan`'s alerts."""
        self.latest[plan.key] = plan.latest
        self.stored[plan.key] = plan.stored
        if plan.firing is None:
            self.firing.pop(plan.key, None)
        else:
            self.firing[plan.key] = plan.firing
        if plan.alerts:
            self.known.add(plan.key)

    def firing_alerts(self) -> list[Alert]:
        """Every firing alert, by node and shard: posted again so that none expires."""
        return [self.firing[key].alert() for key in sorted(self.firing)]

    def _newer(self, key: ShardKey, status: ComputeStatus, stored: float | None) -> bool:
        """Whether `status` (stored at `stored`) is as new as the one held, or newer."""
        held = self.latest.get(key)
        if held is None:
            return True
        held_stored = self.stored.get(key)
        if stored is not None and held_stored is not None:
            return stored >= held_stored
        return status.time >= held.time

    def _plan(
        self, key: ShardKey, now: ComputeStatus, stored: float | None, *, again: bool
    ) -> Plan:
        """From the alert held to the one `now` (stored at `stored`) calls for; `again`: post
        it even unchanged."""
        have = self.firing.get(key)
        alerts = []
        if have is not None and now.verdict != have.status.verdict:
            ends = max(now.time, have.since)
            alerts.append(Alert(now, have.status.verdict, have.since, ends))
        if now.verdict not in FALLBACK_VERDICTS:
            return Plan(key, now, None, alerts, stored)
        if have is not None and have.status.verdict == now.verdict:
            firing = Firing(now, have.since)
            if again or have.status != now:
                alerts.append(firing.alert())  # the same alert, saying what is true now
            return Plan(key, now, firing, alerts, stored)
        firing = Firing(now, now.time)
        alerts.append(firing.alert())
        if key not in self.known:
            ended = FALLBACK_VERDICTS - {now.verdict} - {have.status.verdict if have else ""}
            alerts.extend(Alert(now, v, now.time, now.time) for v in sorted(ended))
        return Plan(key, now, firing, alerts, stored)
