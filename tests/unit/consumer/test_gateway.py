"""A gateway's candidates less the backends placewatch says to avoid: matched by URL, the
latest status deciding, a group never emptied unless asked, each change said once."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from placewatch.consumer.gateway import BadBackends, GroupFilter, Policy
from placewatch.schemas import ComputeStatus, Endpoint
from placewatch.schemas.messages import Verdict

T0 = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
A, B = "http://10.0.0.7:8080/v1", "http://10.0.0.8:8080/v1"


def status(
    verdict: Verdict, host: str = "10.0.0.7", *, node: str = "gpu-7", shard: str = "a", at: int = 0
) -> ComputeStatus:
    return ComputeStatus(
        node=node,
        shard=shard,
        session="s",
        time=T0 + timedelta(seconds=at),
        verdict=verdict,
        reason=f"{verdict} for a test",
        endpoint=Endpoint(host=host, port=8080),
    )


def deployments() -> list[dict[str, object]]:
    return [
        {"model_info": {"id": "da"}, "litellm_params": {"api_base": A}},
        {"model_info": {"id": "db"}, "litellm_params": {"api_base": B}},
        {"model_info": {"id": "dc"}, "litellm_params": {"model": "openai/gpt-x"}},  # no api_base
    ]


def group_filter(bad: BadBackends) -> GroupFilter[dict[str, object]]:
    def base(d: dict[str, object]) -> str | None:
        params = d["litellm_params"]
        assert isinstance(params, dict)
        return params.get("api_base")

    return GroupFilter(bad, base, lambda d: str(d["model_info"]["id"]))  # type: ignore[index]


def ids(kept: list[dict[str, object]]) -> list[str]:
    return [str(d["model_info"]["id"]) for d in kept]  # type: ignore[index]


@pytest.mark.parametrize(
    ("verdict", "kept"),
    [
        ("cpu_fallback", ["db", "dc"]),
        ("misplaced", ["db", "dc"]),
        ("gone", ["db", "dc"]),
        ("partial", ["da", "db", "dc"]),  # kept by default
        ("gpu", ["da", "db", "dc"]),
        ("starting", ["da", "db", "dc"]),
    ],
)
def test_a_deployment_is_removed_for_the_verdicts_the_policy_avoids(
    verdict: Verdict, kept: list[str]
) -> None:
    bad = BadBackends()
    bad.rebuild([status(verdict), status("gpu", "10.0.0.8", shard="b")], {})
    assert ids(group_filter(bad).filter("m", deployments())) == kept


def test_the_policy_says_which_verdicts_and_whether_silence_counts() -> None:
    bad = BadBackends(Policy(avoid=frozenset({"partial"}), silent=False))
    bad.rebuild(
        [status("cpu_fallback"), status("partial", "10.0.0.8", node="gpu-8")], {"gpu-7": 30}
    )
    assert ids(group_filter(bad).filter("m", deployments())) == ["da", "dc"]
    bad = BadBackends()
    bad.rebuild([status("gpu"), status("gpu", "10.0.0.8", node="gpu-8")], {"gpu-8": 31.4})
    why = bad.why(B)
    assert why is not None and (why.verdict, why.reason) == (
        "silent",
        "its node sent no telemetry for 31 s",
    )


def test_the_latest_status_at_an_endpoint_decides() -> None:
    bad = BadBackends()
    bad.rebuild([status("gone", shard="old", at=0), status("gpu", shard="new", at=5)], {})
    assert bad.why(A) is None
    bad.rebuild([status("gpu", shard="old", at=0), status("cpu_fallback", shard="new", at=5)], {})
    assert bad.why("http://10.0.0.7:8080") is not None


def test_a_group_all_bad_is_served_and_said_once_unless_it_may_be_emptied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    both = [status("cpu_fallback"), status("gone", "10.0.0.8", shard="b")]
    only_two = deployments()[:2]
    bad = BadBackends()
    bad.rebuild(both, {})
    groups = group_filter(bad)
    with caplog.at_level(logging.ERROR, "placewatch.consumer.gateway"):
        assert ids(groups.filter("m", only_two)) == ["da", "db"]
        assert ids(groups.filter("m", only_two)) == ["da", "db"]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "every deployment of model group m is bad" in said[0]
    assert groups.decisions == {("served all bad", "cpu_fallback"): 1}
    emptied = BadBackends(Policy(may_empty=True))
    emptied.rebuild(both, {})
    assert group_filter(emptied).filter("m", only_two) == []


def test_removal_and_return_are_each_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = BadBackends()
    groups = group_filter(bad)
    with caplog.at_level(logging.WARNING, "placewatch.consumer.gateway"):
        bad.rebuild([status("cpu_fallback")], {})
        for _ in range(3):
            assert ids(groups.filter("m", deployments())) == ["db", "dc"]
        bad.rebuild([status("gpu", at=9)], {})
        for _ in range(3):
            assert ids(groups.filter("m", deployments())) == ["da", "db", "dc"]
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"placewatch: removed da ({A}) from model group m: shard a on node gpu-7 is "
        "cpu_fallback: cpu_fallback for a test",
        f"placewatch: put da ({A}) back in model group m: its shard is fine again",
    ]
    assert groups.decisions == {("removed", "cpu_fallback"): 1, ("put back", ""): 1}
    assert groups.routed_around == 3


def test_a_hostile_name_is_logged_escaped(caplog: pytest.LogCaptureFixture) -> None:
    bad = BadBackends()
    bad.rebuild([status("gone", shard="a\x1b[2Jb")], {})
    with caplog.at_level(logging.WARNING, "placewatch.consumer.gateway"):
        group_filter(bad).filter("m\x07", deployments())
    assert "\x1b" not in caplog.text and "\x07" not in caplog.text
