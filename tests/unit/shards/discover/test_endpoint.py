"""The port an engine serves on, which names its shard, and its health URL."""

from __future__ import annotations

import pytest

from tests.support.discovery import MODEL, OLLAMA_BLOB, SERVER, found


@pytest.mark.parametrize(
    ("cmdline", "env", "shard", "health_url"),
    [
        (
            [SERVER, "-m", MODEL],
            {"LLAMA_ARG_PORT": "9090"},
            "llama-server-9090",
            "http://127.0.0.1:9090/health",
        ),
        (
            [SERVER, "-m", MODEL, "--port", "9191"],
            {"LLAMA_ARG_PORT": "9090"},
            "llama-server-9191",
            "http://127.0.0.1:9191/health",
        ),
        (
            [SERVER, "-m", MODEL, "--host", "10.0.0.5"],
            {},
            "llama-server-8080",
            "http://10.0.0.5:8080/health",
        ),
        (
            [SERVER, "-m", MODEL, "--host", "::1", "--port", "8082"],
            {},
            "llama-server-8082",
            "http://[::1]:8082/health",
        ),
        (
            [SERVER, "-m", MODEL, "--host", "0.0.0.0", "--api-prefix", "/llm/"],
            {},
            "llama-server-8080",
            "http://127.0.0.1:8080/llm/health",
        ),
        (
            [SERVER, "-m", MODEL, "--host", "/run/llama.sock"],
            {},
            "llama-server-4242",
            None,
        ),  # a unix socket
        ([SERVER, "-m", MODEL, "--port", "0"], {}, "llama-server-4242", None),  # a random port
        (["vllm", "serve", "m", "--uds", "/run/vllm.sock"], {}, "vllm-4242", None),
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "-port", "41000"],
            {},
            "ollama-runner-41000",
            None,
        ),
        (["ollama", "runner", "--model", OLLAMA_BLOB], {}, "ollama-runner-4242", None),
    ],
)
def test_ports_come_from_flags_then_variables_else_the_pid_names_the_shard(
    cmdline: list[str], env: dict[str, str], shard: str, health_url: str | None
) -> None:
    d = found(cmdline, env)
    assert (d.spec.id, d.spec.health_url) == (shard, health_url)


@pytest.mark.parametrize(
    ("host", "health_url"),
    [
        ("gpu7.internal", "http://gpu7.internal:8080/health"),  # a host name, as written
        ("[::]", "http://127.0.0.1:8080/health"),
        ("0:0::0", "http://127.0.0.1:8080/health"),  # every address, however spelled
        ("[fe80::1]", "http://[fe80::1]:8080/health"),
        (" 10.0.0.5 ", "http://10.0.0.5:8080/health"),
    ],
)
def test_the_health_url_reaches_the_host_the_server_is_bound_to(host: str, health_url: str) -> None:
    assert found([SERVER, "-m", MODEL, "--host", host]).spec.health_url == health_url


def test_llama_cpp_python_takes_its_port_from_a_lowercase_variable() -> None:
    d = found(["python", "-m", "llama_cpp.server", "--n_gpu_layers", "-1"], {"port": "8123"})
    assert (d.spec.id, d.spec.health_url) == ("llama-cpp-python-8123", None)


@pytest.mark.parametrize(
    ("cmdline", "url"),
    [
        (
            [SERVER, "-m", MODEL, "--port", "9191"],
            "http://127.0.0.1:9191",
        ),  # llama-server: loopback
        (
            [SERVER, "-m", MODEL, "--host", "0.0.0.0", "--api-prefix", "/llm/"],
            "http://0.0.0.0:8080/llm",
        ),
        ([SERVER, "-m", MODEL, "--host", "[fd00::7]"], "http://[fd00::7]:8080"),
        ([SERVER, "-m", MODEL, "--host", "gpu7.internal"], "http://gpu7.internal:8080"),
        (["vllm", "serve", "m"], "http://0.0.0.0:8000"),  # vLLM binds every address
        (["vllm", "serve", "m", "--host", "10.1.2.3", "--port", "8001"], "http://10.1.2.3:8001"),
    ],
)
def test_the_endpoint_is_the_bind_as_the_flags_say(cmdline: list[str], url: str) -> None:
    endpoint = found(cmdline).spec.endpoint
    assert endpoint is not None and endpoint.url() == url


@pytest.mark.parametrize(
    "cmdline",
    [
        [SERVER, "-m", MODEL, "--host", "/run/llama.sock"],  # a unix socket
        [SERVER, "-m", MODEL, "--port", "0"],  # a random port
        [SERVER, "-m", MODEL, "--host", "a b\x1b]0;x"],  # no host a URL can name
        [SERVER, "-m", MODEL, "--api-prefix", "/a?b=\x1b"],  # no path a URL can hold
    ],
)
def test_no_endpoint_where_no_url_reaches_the_server(cmdline: list[str]) -> None:
    assert found(cmdline).spec.endpoint is None
