"""`placewatch alerts` as the command line asks for it: what it refuses before connecting."""

from __future__ import annotations

import argparse

import pytest

from placewatch.consumer.alerts import add_arguments, command
from placewatch.consumer.connection import Bus


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="placewatch alerts")
    add_arguments(parser)
    return parser.parse_args(argv)


def test_the_defaults() -> None:
    args = parse()
    assert (args.durable, args.webhook, args.format) == ("placewatch-alerts", None, "json")
    assert (args.generator_url, args.resend, args.timeout) == (None, 60.0, 10.0)


def test_the_alertmanager_format_without_a_webhook_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert command(Bus(), parse("--format", "alertmanager")) == 2
    assert capsys.readouterr().err == "placewatch: --format alertmanager needs --webhook URL\n"


def test_a_webhook_that_is_not_http_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert command(Bus(), parse("--webhook", "hooks.example/x")) == 2
    assert capsys.readouterr().err == (
        "placewatch: --webhook 'hooks.example/x': give an http:// or https:// URL\n"
    )
