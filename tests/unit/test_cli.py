"""The command line: a parser in two stages, where only the command named brings its flags."""

from __future__ import annotations

import argparse
import json
import os
import re

import pytest

from placewatch import __version__
from placewatch.cli import COMMANDS, HELP, main
from placewatch.worker.forget import duration

COMMAND_NAMES = [
    "run", "sample", "doctor", "health", "forget", "watch", "alerts", "exporter", "schema",
    "partition",
]  # fmt: skip


@pytest.fixture(autouse=True)
def wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """One help entry per line (argparse wraps at $COLUMNS), and no PLACEWATCH_* setting."""
    monkeypatch.setenv("COLUMNS", "200")
    for name in [n for n in os.environ if n.startswith("PLACEWATCH_")]:
        monkeypatch.delenv(name)


def exits(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run main() on a command line argparse ends itself: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capsys.readouterr()
    assert isinstance(done.value.code, int)
    return done.value.code, out, err


def option_line(help_text: str, flag: str) -> str:
    (line,) = [ln.strip() for ln in help_text.splitlines() if ln.strip().startswith(flag + " ")]
    return line


def test_help_lists_every_command_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exits(["--help"], capsys)
    assert code == 0
    listed = re.findall(r"^    (\w+)\s+(.+)$", out, re.M)
    assert listed == [(name, HELP[name][0]) for name in COMMAND_NAMES]
    assert sorted(COMMANDS) == sorted(set(COMMAND_NAMES) - {"schema", "partition"})


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out, _ = capsys.readouterr()
    assert out.startswith("usage: placewatch [-h] [--version] COMMAND ...")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exits(["--version"], capsys)
    assert (code, out) == (0, f"placewatch {__version__}\n")


def test_alerts_help_shows_durable_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exits(["alerts", "--help"], capsys)
    assert code == 0
    assert option_line(out, "--durable") == (
        "--durable NAME        the durable consumer's name; it keeps the position "
        "(placewatch-alerts)"
    )
    assert option_line(out, "--nats").startswith("--nats URL")
    assert "--interval" not in out  # a node's flag, not a bus reader's


def test_each_command_has_its_own_flags_only(capsys: pytest.CaptureFixture[str]) -> None:
    _, sample, _ = exits(["sample", "--help"], capsys)
    _, run, _ = exits(["run", "--help"], capsys)
    assert option_line(sample, "--json") == (
        "--json                print the whole NodeSample (inventory and readings) as JSON"
    )
    assert "--nats" not in sample and "--durable" not in sample
    assert option_line(run, "--no-create").startswith("--no-create")
    assert "--json" not in run and "--durable" not in run


def test_an_unknown_command_exits_2_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exits(["frobnicate"], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "placewatch: error: argument COMMAND: invalid choice: 'frobnicate' "
        "(choose from 'run', 'sample', 'doctor', 'health', 'forget', 'watch', 'alerts', 'exporter', "
        "'schema', 'partition')"
    )


def test_a_flag_of_another_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = exits(["sample", "--nats", "nats://x:4222"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == "placewatch: error: unrecognized arguments: --nats nats://x:4222"


def test_a_bad_choice_exits_2_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = exits(["alerts", "--format", "xml"], capsys)
    assert code == 2
    assert "argument --format: invalid choice: 'xml' (choose from 'json', 'alertmanager')" in err


def test_a_bad_setting_returns_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sample", "--interval", "0"]) == 2
    _, err = capsys.readouterr()
    assert (
        err
        == "placewatch: --interval: Expected `float` >= 0.1; give a number of seconds from 0.1 to 86400\n"
    )


def test_an_unreadable_credentials_file_returns_2_before_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["watch", "--creds", "/nonexistent/node.creds"]) == 2
    _, err = capsys.readouterr()
    assert err == (
        "placewatch: creds: /nonexistent/node.creds cannot be read (No such file or directory); "
        "check the path and its permissions\n"
    )


def test_schema_prints_the_asyncapi_document_for_a_prefix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "--asyncapi", "--prefix", "pw"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["asyncapi"] == "3.0.0"
    assert document["channels"]["telemetry"]["address"] == "pw.telemetry.{node}"


def test_schema_prints_the_json_schema_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["title"] == "placewatch messages"
    assert "NodeTelemetry" in document["$defs"]


def test_forget_takes_a_node_and_the_bus_flags_and_no_node_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = exits(["forget", "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: placewatch forget [-h] [--config FILE]")
    assert option_line(out, "NODE") == (
        "NODE                  the node's name, as its worker published it (its --node)"
    )
    assert option_line(out, "--dry-run") == (
        "--dry-run             say what would be done, and change nothing"
    )
    assert option_line(out, "--prefix").startswith("--prefix PREFIX")
    assert "--health-file" not in out and "--interval" not in out
    assert option_line(out, "--silent-for").startswith("--silent-for DURATION")
    for argv in (["forget"], ["forget", "gpu-07", "--silent-for", "1h"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            "placewatch: forget: give one NODE, or --silent-for DURATION for every node the bus "
            "has heard nothing of for that long\n"
        )
    code, _, err = exits(["forget", "--silent-for", "soon"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == (
        "placewatch forget: error: argument --silent-for: 'soon' is not a duration: give a "
        "number of seconds, or one ending in s, m, h or d (90s, 30m, 12h, 7d), up to a year"
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("1.5m", 90), ("12h", 43200), ("7d", 604800)]
)
def test_a_duration_is_seconds_or_a_number_with_its_unit(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "nan", "inf", "1y", "400d", "h", "m5"])
def test_a_duration_that_is_none_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a duration"):
        duration(text)


def test_the_largest_n_a_command_takes_is_the_largest_the_mapping_check_tries() -> None:
    from placewatch.arguments import MOST_PARTITIONS
    from placewatch.consumer.mapping import MAX_N

    assert MAX_N == MOST_PARTITIONS == 1024
