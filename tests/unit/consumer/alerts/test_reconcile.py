"""Which alerts Alertmanager should hold: each shard's latest status decides, whether it came
as a fallback event, a compute status or from the compute bucket at start."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from placewatch.consumer.alerts.reconcile import Alert, AlertState, Message, Plan

from tests.support.fallback_events import FIRING, MOVED, RESOLVED, T1, T2, T_MOVED, status

STORED = 1_795_000_000.0
"""A time the server stored a message at (seconds since the epoch)."""


def posted(state: AlertState, message: Message, stored: float | None = None) -> list[Alert]:
    """What delivering `message` (stored at `stored`) posts; Alertmanager takes it."""
    plan = state.plan(message, stored)
    state.commit(plan)
    return plan.alerts


def labels(alerts: list[Alert]) -> list[tuple[str, str]]:
    """(verdict label, firing or ended) of each alert."""
    return [(a.verdict, "firing" if a.ends is None else "ended") for a in alerts]


def test_a_firing_event_fires_its_verdict_from_its_time() -> None:
    state = AlertState()
    alert, *ended = posted(state, FIRING)
    assert alert == Alert(FIRING.status, "cpu_fallback", T1)
    assert state.firing_alerts() == [alert]
    # The first this process says of the shard: an alert of another verdict, posted by a
    # run whose messages are gone, ends; one that never fired notifies nobody.
    assert labels(ended) == [("misplaced", "ended"), ("partial", "ended")]
    assert {(a.starts, a.ends) for a in ended} == {(T1, T1)}


def test_the_status_that_follows_its_event_posts_nothing() -> None:
    state = AlertState()
    posted(state, FIRING)
    assert posted(state, FIRING.status) == []


def test_a_verdict_change_ends_the_old_alert_and_fires_the_new_in_one_post() -> None:
    state = AlertState()
    posted(state, FIRING)
    ended, fired = posted(state, MOVED)
    assert ended == Alert(MOVED, "cpu_fallback", T1, T_MOVED)  # says what it does now
    assert fired == Alert(MOVED, "misplaced", T_MOVED)
    assert state.firing_alerts() == [fired]  # what a resend posts: the truth now


def test_the_resolved_event_after_a_change_ends_the_verdict_it_had_last() -> None:
    state = AlertState()
    for message in (FIRING, MOVED):
        posted(state, message)
    (ended,) = posted(state, RESOLVED)
    assert ended == Alert(RESOLVED.status, "misplaced", T_MOVED, T2)
    assert state.firing_alerts() == []
    assert posted(state, RESOLVED.status) == []


def test_a_new_reason_under_the_same_verdict_updates_the_same_alert() -> None:
    state = AlertState()
    posted(state, FIRING)
    later = msgspec.structs.replace(FIRING.status, time=T_MOVED, reason="still on the CPU")
    (again,) = posted(state, later)
    assert again == Alert(later, "cpu_fallback", T1)  # started when it fired


def test_a_message_older_than_the_status_held_changes_nothing() -> None:
    state = AlertState()
    state.seed([(RESOLVED.status, None)])  # the bucket: resolved at T2, no stored time
    assert posted(state, FIRING) == []  # queued from before: history
    assert state.firing_alerts() == []


def test_the_server_s_stored_times_order_statuses_not_the_node_s_clock() -> None:
    state = AlertState()
    posted(state, FIRING, STORED)
    # NTP steps the node's clock back an hour; the shard is placed right again.
    back = status("gpu", T1 - timedelta(hours=1), "on GPU 0")
    (ended,) = posted(state, back, STORED + 10)
    assert (ended.verdict, ended.starts, ended.ends) == ("cpu_fallback", T1, T1)
    assert state.firing_alerts() == []
    # It falls back again, its clock still behind: a new alert, from its own time.
    again = msgspec.structs.replace(FIRING.status, time=T1 - timedelta(minutes=59))
    assert labels(posted(state, again, STORED + 20)) == [("cpu_fallback", "firing")]


def test_an_event_stored_before_the_bucket_s_status_is_history_whatever_its_time() -> None:
    # The node's clock ran an hour ahead when the event was queued; the bucket's status,
    # stored after it, says the shard resolved.
    state = AlertState()
    state.seed([(RESOLVED.status, STORED + 5)])
    ahead = msgspec.structs.replace(
        FIRING, status=msgspec.structs.replace(FIRING.status, time=T2 + timedelta(hours=1))
    )
    assert posted(state, ahead, STORED) == []
    assert state.firing_alerts() == []


def test_a_status_without_its_event_fires_all_the_same() -> None:
    # A worker that restarts while the shard still falls back publishes its status only.
    state = AlertState()
    state.known.add(("gpu-07", "llama-8b-a"))
    assert labels(posted(state, MOVED)) == [("misplaced", "firing")]


def test_a_failed_post_is_planned_again_the_same() -> None:
    state = AlertState()
    posted(state, FIRING)
    first = state.plan(MOVED)  # not committed: Alertmanager did not take it
    assert state.plan(MOVED) == first
    assert labels(state.firing_alerts()) == [("cpu_fallback", "firing")]


def test_after_a_restart_a_shard_resolved_meanwhile_is_ended_not_fired_again() -> None:
    # Killed with the resolved event in flight: the acknowledged messages say cpu_fallback
    # fired, the bucket says it resolved.
    state = AlertState()
    state.learn(FIRING, STORED)
    state.seed([(RESOLVED.status, STORED + 5)])
    (plan,) = state.plan_all()
    assert plan.alerts == [Alert(RESOLVED.status, "cpu_fallback", T1, T2)]
    state.commit(plan)
    assert state.firing_alerts() == []
    assert posted(state, RESOLVED) == []  # redelivered after the ack wait: nothing more


def test_after_a_restart_a_verdict_changed_meanwhile_ends_the_old_and_fires_the_new() -> None:
    state = AlertState()
    state.learn(FIRING, STORED)
    state.seed([(MOVED, STORED + 5)])
    (plan,) = state.plan_all()
    assert labels(plan.alerts) == [("cpu_fallback", "ended"), ("misplaced", "firing")]


def test_after_a_restart_what_fires_is_posted_again_and_nothing_else() -> None:
    state = AlertState()
    state.learn(FIRING, STORED)
    state.seed(
        [(FIRING.status, STORED + 1), (status("gpu", T2, "on GPU 0", shard="steady"), STORED)]
    )
    (plan,) = state.plan_all()
    assert plan == Plan(
        plan.key,
        FIRING.status,
        plan.firing,
        [Alert(FIRING.status, "cpu_fallback", T1)],
        STORED + 1,
    )


def test_a_firing_shard_whose_alerts_are_unknown_ends_the_other_two_verdicts() -> None:
    state = AlertState()
    state.seed([(MOVED, STORED)])  # nothing acknowledged before: any verdict may be in Alertmanager
    (plan,) = state.plan_all()
    assert labels(plan.alerts) == [
        ("misplaced", "firing"),
        ("cpu_fallback", "ended"),
        ("partial", "ended"),
    ]
    state.commit(plan)
    assert labels(posted(state, RESOLVED)) == [("misplaced", "ended")]


def test_a_resolved_event_whose_firing_is_unknown_ends_every_fallback_verdict() -> None:
    state = AlertState()
    ended = posted(state, RESOLVED)
    assert labels(ended) == [
        ("cpu_fallback", "ended"),
        ("misplaced", "ended"),
        ("partial", "ended"),
    ]
    assert {(a.starts, a.ends) for a in ended} == {(T2, T2)}
    assert posted(state, RESOLVED) == []  # known now


def test_a_shard_that_never_fell_back_posts_nothing() -> None:
    state = AlertState()
    state.seed([(status("gpu", T1, "on GPU 1"), STORED)])
    assert state.plan_all() == []
    assert posted(state, status("gpu", T2, "on GPU 1")) == []
