"""Settings: flags over environment over file over defaults; bad input exits 2 naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from placewatch.worker.config import ConfigError, load


def test_defaults() -> None:
    s = load({}, environ={})
    assert s.nats == []
    assert s.interval == 2.0
    assert s.prefix == "placewatch"
    assert s.gpu_sources == ["nvml", "nvidia-smi", "rocm-smi", "amd-smi", "xpu-smi", "intel-sysfs"]
    assert s.node  # the short hostname
    assert "." not in s.node
    assert s.takeover is False


@pytest.mark.parametrize(
    ("flags", "environ", "file", "expected"),
    [
        ({"takeover": True}, {}, "", True),
        ({}, {"PLACEWATCH_TAKEOVER": "true"}, "", True),
        ({}, {}, "takeover = true\n", True),
        ({}, {"PLACEWATCH_TAKEOVER": "false"}, "takeover = true\n", False),
    ],
)
def test_takeover_from_a_flag_the_environment_or_the_file(
    tmp_path: Path, flags: dict[str, bool], environ: dict[str, str], file: str, expected: bool
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(file)
    assert load(flags, environ=environ, config_path=str(config)).takeover is expected


def test_flags_over_environment_over_file(tmp_path: Path) -> None:
    config = tmp_path / "placewatch.toml"
    config.write_text('node = "from-file"\ninterval = 7\nprefix = "pw"\nnats = ["nats://a:4222"]\n')
    env = {"PLACEWATCH_NODE": "from-env", "PLACEWATCH_INTERVAL": "3.5"}
    s = load({"node": "from-flag"}, environ=env, config_path=str(config))
    assert s.node == "from-flag"
    assert s.interval == 3.5
    assert s.prefix == "pw"
    assert s.nats == ["nats://a:4222"]


def test_config_file_from_environment_and_url_lists(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('nats = "nats://a:4222, nats://b:4222"\n')
    s = load({}, environ={"PLACEWATCH_CONFIG": str(config)})
    assert s.nats == ["nats://a:4222", "nats://b:4222"]
    s = load({}, environ={"PLACEWATCH_NATS": "nats://c:1,nats://d:2"})
    assert s.nats == ["nats://c:1", "nats://d:2"]


def test_gpu_sources_as_a_list_or_comma_separated(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('gpu_sources = ["rocm-smi", "amd-smi"]\n')
    assert load({}, environ={}, config_path=str(config)).gpu_sources == ["rocm-smi", "amd-smi"]
    env = {"PLACEWATCH_GPU_SOURCES": "nvidia-smi, amd-smi"}
    assert load({}, environ=env).gpu_sources == ["nvidia-smi", "amd-smi"]
    assert load({"gpu_sources": "nvml"}, environ=env).gpu_sources == ["nvml"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "nvml,cuda",
            "Invalid enum value 'cuda'; expected one of nvml, nvidia-smi, rocm-smi, amd-smi, xpu-smi, intel-sysfs",
        ),
        (
            " , ",
            "names none; name at least one of nvml, nvidia-smi, rocm-smi, amd-smi, xpu-smi, intel-sysfs",
        ),
    ],
)
def test_bad_gpu_sources_name_the_choices(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load({}, environ={"PLACEWATCH_GPU_SOURCES": value})
    assert str(caught.value) == f"environment variable PLACEWATCH_GPU_SOURCES: {message}"
    with pytest.raises(ConfigError) as caught:
        load({"gpu_sources": value}, environ={})
    assert str(caught.value) == f"--gpu-sources: {message}"


def test_unknown_file_key_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("intreval = 3\n")
    with pytest.raises(
        ConfigError, match=r"unknown key .intreval.; known keys: nats, user, password, token"
    ):
        load({}, environ={}, config_path=str(config))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('interval = "fast"', "key 'interval': Expected `float`, got `str`"),
        (
            "interval = 0",
            "key 'interval': Expected `float` >= 0.1; give a number of seconds from 0.1 to 86400",
        ),
        (
            'encoding = "xml"',
            "key 'encoding': Invalid enum value 'xml'; expected one of json, msgpack",
        ),
        ("embedded_port = 70000", "key 'embedded_port': Expected `int` <= 65535"),
    ],
)
def test_wrong_type_in_file_names_key_and_expectation(
    tmp_path: Path, text: str, message: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        load({}, environ={}, config_path=str(config))
    assert str(caught.value).startswith(f"config file {config}: {message}")


def test_bad_environment_names_the_variable() -> None:
    with pytest.raises(
        ConfigError, match=r"^environment variable PLACEWATCH_INTERVAL: Expected `float`"
    ):
        load({}, environ={"PLACEWATCH_INTERVAL": "soon"})
    with pytest.raises(
        ConfigError, match=r"^environment variable PLACEWATCH_NODES is not a placewatch setting"
    ):
        load({}, environ={"PLACEWATCH_NODES": "x"})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"interval": float("inf")},
            "--interval: Expected `float` <= 86400.0; give a number of seconds from 0.1 to 86400",
        ),
        (
            {"interval": float("nan")},
            "--interval: Expected `float` >= 0.1; give a number of seconds from 0.1 to 86400",
        ),
        (
            {"interval": 0.01},
            "--interval: Expected `float` >= 0.1; give a number of seconds from 0.1 to 86400",
        ),
        (
            {"node": ""},
            "--node: Expected `str` of length >= 1; give this node a name of 1 to 128 bytes",
        ),
        (
            {"node": "é" * 65},
            "--node: is 130 bytes of UTF-8; give this node a name of 1 to 128 bytes",
        ),
        (
            {"probe_timeout": float("inf")},
            "--probe-timeout: Expected `float` <= 86400.0; give a number of seconds above 0, "
            "at most 86400",
        ),
    ],
)
def test_settings_that_mean_nothing_are_refused_saying_what_to_give(
    flags: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(flags, environ={})
    assert str(caught.value) == message


def test_the_shortest_interval_and_a_long_node_name_are_taken() -> None:
    settings = load({"interval": 0.1, "node": "n" * 128}, environ={})
    assert (settings.interval, settings.node) == (0.1, "n" * 128)


RULE = (
    "cannot name streams and buckets: give a prefix of at most 64 characters, one or more "
    "tokens joined by dots, each of lowercase letters a-z, digits and '-' (such as "
    "'placewatch' or 'acme.pw'); docs/subjects.md, Streams and buckets"
)


def test_a_prefix_with_dots_is_taken() -> None:
    assert load({"prefix": "acme.pw"}, environ={}).prefix == "acme.pw"


def test_a_prefix_with_no_stream_names_is_refused_where_it_was_given(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load({"prefix": "Acme_PW"}, environ={})
    assert str(caught.value) == f"--prefix: subject prefix 'Acme_PW' {RULE}"
    with pytest.raises(ConfigError) as caught:
        load({}, environ={"PLACEWATCH_PREFIX": "pw.>"})
    assert (
        str(caught.value) == f"environment variable PLACEWATCH_PREFIX: subject prefix 'pw.>' {RULE}"
    )
    config = tmp_path / "c.toml"
    config.write_text('prefix = "acme..pw"\n')
    with pytest.raises(ConfigError) as caught:
        load({}, environ={}, config_path=str(config))
    assert str(caught.value) == (
        f"config file {config}: key 'prefix': subject prefix 'acme..pw' {RULE}"
    )


def test_the_advertised_host_is_a_host_or_refused() -> None:
    assert load({}, environ={}).advertise_host is None
    given = load({}, environ={"PLACEWATCH_ADVERTISE_HOST": "gpu7.internal"})
    assert given.advertise_host == "gpu7.internal"
    with pytest.raises(ConfigError, match=r"PLACEWATCH_ADVERTISE_HOST|advertise_host"):
        load({}, environ={"PLACEWATCH_ADVERTISE_HOST": "gpu7 \x1b[2J"})
