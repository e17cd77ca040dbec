"""Every bad argument, for every command, is one line and exit 2: nothing started, no
traceback, no usage, the line naming the argument and what to give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import clean_env, run_placewatch

RULE = (
    "cannot name streams and buckets: give a prefix of at most 64 characters, one or more "
    "tokens joined by dots, each of lowercase letters a-z, digits and '-' (such as "
    "'placewatch' or 'acme.pw'); docs/subjects.md, Streams and buckets"
)
"""What a bad prefix is told, after what it was (as tests/unit/test_config.py asserts it)."""

COMMANDS = ("run", "doctor", "health", "watch", "alerts", "exporter")
"""The commands that take the connection's flags (forget takes a NODE besides; `sample`
takes none: it needs no bus)."""


@pytest.mark.parametrize("command", [*COMMANDS, "forget"])
@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("nats://127.0.0.1:99999", "has no port from 1 to 65535: give nats://HOST:PORT"),
        ("nats://127.0.0.1:abc", "has no port from 1 to 65535: give nats://HOST:PORT"),
        ("", "--nats: names no server; give nats://HOST:PORT"),
        ("http://127.0.0.1:4222", "is not a NATS URL: give nats://HOST:PORT"),
        ("nats://:4222", "names no host: give nats://HOST:PORT"),
    ],
    ids=["port-too-big", "port-not-a-number", "empty", "http", "no-host"],
)
def test_a_bad_server_url_is_one_line_and_exit_2(command: str, given: str, said: str) -> None:
    extra = ("gpu-07",) if command == "forget" else ()
    done = run_placewatch(command, *extra, "--nats", given)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("placewatch: --nats: ") and said in line, line
    assert done.stdout == ""


def test_the_environment_s_bad_url_is_said_as_the_variable() -> None:
    done = run_placewatch("watch", env=clean_env() | {"PLACEWATCH_NATS": "nats://h:0"})
    assert done.returncode == 2
    assert done.stderr == (
        "placewatch: environment variable PLACEWATCH_NATS: 'nats://h:0' has no port from 1 to "
        "65535: give nats://HOST:PORT\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("forget", "gpu-07", "--timeout", "inf"),
        ("forget", "gpu-07", "--timeout", "0"),
        ("health", "--timeout", "-1"),
        ("doctor", "--timeout", "nan"),
        ("exporter", "--stale-after", "0"),
    ],
    ids=" ".join,
)
def test_a_limit_that_is_no_limit_is_refused(args: tuple[str, ...]) -> None:
    done = run_placewatch(*args)
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert "is not a limit: give a number of seconds above 0, at most 86400" in last, last
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["run", "sample", "exporter"])
def test_an_empty_node_name_is_refused(command: str) -> None:
    done = run_placewatch(command, "--node", "")
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert "1 to 128 bytes" in last, last


def test_cli_exits_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('node = "n"\nshards_dir = "/x"\n')
    done = run_placewatch("run", "--config", str(config))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"placewatch: config file {config}: unknown key 'shards_dir'")


def test_cli_missing_or_broken_file_exits_2(tmp_path: Path) -> None:
    done = run_placewatch("sample", "--config", str(tmp_path / "absent.toml"))
    assert done.returncode == 2
    assert "does not exist" in done.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text("node = \n")
    done = run_placewatch("sample", "--config", str(broken))
    assert done.returncode == 2
    assert f"config file {broken} is not valid TOML" in done.stderr


def test_cli_config_path_that_names_no_file_or_no_text_exits_2(tmp_path: Path) -> None:
    """A named pipe would block the start until someone wrote to it; bytes that are not UTF-8
    would end in a traceback."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = run_placewatch("sample", "--config", str(fifo))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"placewatch: config file {fifo} is a named pipe; give the path of a file; "
        "check --config or PLACEWATCH_CONFIG\n"
    )
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'node = "n\xf6de"\n')
    done = run_placewatch("sample", "--config", str(latin))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"placewatch: config file {latin} is not UTF-8 text (byte 0xf6 at offset 9); "
        "check --config or PLACEWATCH_CONFIG\n"
    )


def test_cli_bad_flag_value_exits_2() -> None:
    env = clean_env()
    done = run_placewatch("sample", "--interval", "-1", env=env)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "placewatch: --interval: Expected `float` >= 0.1; give a number of seconds from 0.1 to 86400"
    )


def test_cli_refuses_a_bad_prefix_with_exit_2_for_every_command() -> None:
    for command in (["run"], ["watch", "--once"], ["alerts"], ["schema", "--asyncapi"]):
        done = run_placewatch(*command, "--prefix", "acme_pw")
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr == f"placewatch: --prefix: subject prefix 'acme_pw' {RULE}\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("run", "--interval", "abc"), "placewatch run: error: argument --interval: "),
        (("run", "--encoding", "xml"), "placewatch run: error: argument --encoding: "),
        (("sample", "--gpu-sources"), "placewatch sample: error: argument --gpu-sources: "),
        (("doctor", "--timeout", "0"), "placewatch doctor: error: argument --timeout: "),
        (("health", "--timeout", "-1"), "placewatch health: error: argument --timeout: "),
        (("forget", "gpu-07", "--silent-for", "soon"), "placewatch forget: error: argument "),
        (("watch", "--wait", "-3"), "placewatch watch: error: argument --wait: '-3' is not a"),
        (("watch", "--partition", "1/2000"), "placewatch watch: error: argument --partition: "),
        (("alerts", "--format", "xml"), "placewatch alerts: error: argument --format: "),
        (("exporter", "--listen", ":70000"), "placewatch exporter: error: argument --listen: "),
        (("exporter", "--partition", "0/0"), "placewatch exporter: error: argument --partition"),
        (("exporter", "--nodes", " "), "placewatch exporter: error: argument --nodes: an empty"),
        (("exporter", "--node", "a", "--nodes", "b*"), "placewatch exporter: error: argument --n"),
        (("schema", "--asyncapi", "--prefix"), "placewatch schema: error: argument --prefix: "),
        (("partition", "", "--partitions", "4"), "placewatch partition: error: argument NODE: "),
        (("partition", "n", "--partitions", "x"), "placewatch partition: error: argument --part"),
        (("frobnicate",), "placewatch: error: argument COMMAND: invalid choice: 'frobnicate'"),
    ],
    ids=" ".join,
)
def test_a_bad_value_is_one_line_naming_the_argument_without_the_usage(
    args: tuple[str, ...], said: str
) -> None:
    done = run_placewatch(*args)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(said), line
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("100000000000", "100000000000 partitions: give the N of the servers' partition "),
        ("0", "0 partitions: give the N of the servers' partition mapping, 1 to 1024"),
        ("1025", "1025 partitions: give the N of the servers' partition mapping, 1 to 1024"),
    ],
)
def test_partition_takes_at_most_1024_partitions(given: str, said: str) -> None:
    done = run_placewatch("partition", "gpu-07", "--partitions", given)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"placewatch partition: error: argument --partitions: {said}"), line
    assert line.endswith("(docs/operations.md, Partitions)"), line


def test_partition_takes_1024_partitions() -> None:
    done = run_placewatch("partition", "gpu-07", "--partitions", "1024")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpu-07: partition ")
