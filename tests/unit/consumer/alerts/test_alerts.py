"""`placewatch alerts` as the command line and its environment ask for it: each flag with a
PLACEWATCH_ALERTS_* variable, and what it refuses before connecting."""

from __future__ import annotations

import argparse

import pytest

from placewatch.connection import Bus
from placewatch.consumer.alerts import add_arguments, command
from placewatch.consumer.alerts.options import ENVIRONMENT, OptionError, Options, options
from placewatch.worker.config import load


def parse(*argv: str, env: dict[str, str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="placewatch alerts")
    add_arguments(parser, dict(env or {}))
    return parser.parse_args(argv)


def test_the_defaults() -> None:
    assert options(parse()) == Options(
        durable="placewatch-alerts",
        webhook=None,
        format="json",
        generator_url=None,
        resend=60.0,
        timeout=10.0,
        labels={},
        annotations={},
        blind_after=300.0,
    )


def test_every_flag_has_a_variable_and_the_flag_wins() -> None:
    env = {
        "PLACEWATCH_ALERTS_DURABLE": "ops",
        "PLACEWATCH_ALERTS_WEBHOOK": "http://am:9093/api/v2/alerts",
        "PLACEWATCH_ALERTS_FORMAT": "alertmanager",
        "PLACEWATCH_ALERTS_GENERATOR_URL": "http://grafana/d/pw",
        "PLACEWATCH_ALERTS_RESEND": "30",
        "PLACEWATCH_ALERTS_TIMEOUT": "2.5",
        "PLACEWATCH_ALERTS_LABELS": "team=inference, env=prod",
        "PLACEWATCH_ALERTS_ANNOTATIONS": "runbook_url=https://runbooks.example/pw",
        "PLACEWATCH_ALERTS_BLIND_AFTER": "120",
    }
    assert set(env) == set(ENVIRONMENT.values())
    assert options(parse(env=env)) == Options(
        durable="ops",
        webhook="http://am:9093/api/v2/alerts",
        format="alertmanager",
        generator_url="http://grafana/d/pw",
        resend=30.0,
        timeout=2.5,
        labels={"team": "inference", "env": "prod"},
        annotations={"runbook_url": "https://runbooks.example/pw"},
        blind_after=120.0,
    )
    flags = parse(
        *("--durable", "x", "--resend", "0", "--blind-after", "0", "--label", "env=staging"),
        env=env,
    )
    chosen = options(flags)
    assert (chosen.durable, chosen.resend, chosen.blind_after) == ("x", 0.0, 0.0)
    assert chosen.labels == {"team": "inference", "env": "staging"}  # one name replaced


def test_one_environment_serves_the_node_s_settings_and_alerts() -> None:
    environ = {"PLACEWATCH_ALERTS_WEBHOOK": "http://h/x", "PLACEWATCH_NATS": "nats://n:4222"}
    parser = argparse.ArgumentParser()
    add_arguments(parser, environ)
    assert options(parser.parse_args([])).webhook == "http://h/x"
    assert load({}, environ=environ).nats == ["nats://n:4222"]


def test_labels_and_annotations_repeat() -> None:
    args = parse("--label", "team=a", "--label", "severity=page", "--annotation", "x=a=b")
    chosen = options(args)
    assert chosen.labels == {"team": "a", "severity": "page"}
    assert chosen.annotations == {"x": "a=b"}  # the value is what follows the first =


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        (
            ("--label", "team"),
            {},
            "--label 'team': give NAME=VALUE, such as team=inference",
        ),
        (
            ("--label", "team="),
            {},
            "--label 'team=': give NAME=VALUE, such as team=inference",
        ),
        (
            ("--label", "node=gpu-01"),
            {},
            "--label 'node=gpu-01': node is set from each shard's status; pick another name",
        ),
        (
            ("--annotation", "description=x"),
            {},
            "--annotation 'description=x': description is set from each shard's status; "
            "pick another name",
        ),
        (
            (),
            {"PLACEWATCH_ALERTS_LABELS": "team=a,gpu-pool=b"},
            "PLACEWATCH_ALERTS_LABELS 'gpu-pool=b': a name is letters, digits and _, "
            "not starting with a digit",
        ),
        (
            ("--resend", "-1"),
            {},
            "--resend -1: give a number of seconds, 0 or more (0: never)",
        ),
        (
            (),
            {"PLACEWATCH_ALERTS_TIMEOUT": "soon"},
            "PLACEWATCH_ALERTS_TIMEOUT='soon': give a number of seconds, more than 0",
        ),
        (
            ("--timeout", "0"),
            {},
            "--timeout 0: give a number of seconds, more than 0",
        ),
        (
            (),
            {"PLACEWATCH_ALERTS_FORMAT": "xml"},
            "PLACEWATCH_ALERTS_FORMAT='xml': give json or alertmanager",
        ),
        (
            (),
            {"PLACEWATCH_ALERTS_HOOK": "http://h/x"},
            "environment variable PLACEWATCH_ALERTS_HOOK is not a setting of placewatch alerts; "
            f"known: {', '.join(ENVIRONMENT.values())}",
        ),
    ],
)
def test_a_bad_value_names_where_it_came_from_and_what_to_give(
    argv: tuple[str, ...], env: dict[str, str], said: str
) -> None:
    with pytest.raises(OptionError) as caught:
        options(parse(*argv, env=env))
    assert str(caught.value) == said


def test_a_bad_option_exits_2_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert command(Bus(), parse("--label", "x")) == 2
    assert capsys.readouterr().err == (
        "placewatch: --label 'x': give NAME=VALUE, such as team=inference\n"
    )


def test_the_alertmanager_format_without_a_webhook_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert command(Bus(), parse(env={"PLACEWATCH_ALERTS_FORMAT": "alertmanager"})) == 2
    assert capsys.readouterr().err == (
        "placewatch: --format alertmanager needs --webhook URL (or PLACEWATCH_ALERTS_WEBHOOK)\n"
    )


def test_a_webhook_that_is_not_http_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert command(Bus(), parse("--webhook", "hooks.example/x")) == 2
    assert capsys.readouterr().err == (
        "placewatch: --webhook 'hooks.example/x': give an http:// or https:// URL\n"
    )


def test_help_names_each_variable() -> None:
    parser = argparse.ArgumentParser(prog="placewatch alerts")
    add_arguments(parser, {})
    text = " ".join(parser.format_help().split())
    for variable in ENVIRONMENT.values():
        assert variable in text
