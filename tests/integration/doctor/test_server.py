"""The server checks: TCP reachability and the NATS handshake, against real nats-servers."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from nats.aio.client import Client

from placewatch.worker.config import Settings
from placewatch.worker.doctor.report import Report
from placewatch.worker.doctor.server import ServerErrors, check_server, close

from tests.conftest import FakeGpuTools, NatsServer, free_port, run_placewatch
from tests.support.doctor import A100_GPUS, lines

LATER = ("JetStream", "streams and buckets", "clock", "publish permission")


def checked(settings: Settings) -> tuple[list[str], bool]:
    """The report's lines of the server checks, and whether they left a connection."""
    said: list[str] = []

    async def check() -> Client | None:
        nc = await check_server(settings, ServerErrors(), Report(said.append), LATER)
        if nc is not None:
            await close(nc)
        return nc

    return said, anyio.run(check) is not None


def test_a_server_that_takes_the_node_is_reachable_and_authenticated(
    nats_server: NatsServer,
) -> None:
    said, connected = checked(Settings(nats=[nats_server.url], node="gpu-07"))
    assert connected
    reachable, authenticated = said
    assert re.fullmatch(
        rf"ok    server reachable: {nats_server.url}: TCP connect in \d+ ms", reachable
    ), reachable
    assert re.fullmatch(
        rf"ok    server authenticated: connected to {nats_server.url} with no credentials "
        r"\(nats-server \d+\.\d+\.\d+\)",
        authenticated,
    ), authenticated


def test_a_url_that_is_no_url_fails_and_skips_every_later_check() -> None:
    said, connected = checked(Settings(nats=["nats://127.0.0.1:99999"]))
    assert not connected
    assert said == [
        "fail  server reachable: nats://127.0.0.1:99999 is not a valid URL; next: fix --nats "
        "(or PLACEWATCH_NATS)",
        "skip  server authenticated: no server reachable",
        "skip  JetStream: no server reachable",
        "skip  streams and buckets: no server reachable",
        "skip  clock: no server reachable",
        "skip  publish permission: no server reachable",
    ]


def test_no_server_configured_and_none_on_the_embedded_port_says_run_starts_one() -> None:
    port = free_port()
    said, connected = checked(Settings(embedded_port=port))
    assert not connected
    reachable = said[0]
    assert reachable.startswith(
        f"fail  server reachable: nats://127.0.0.1:{port} (none configured: the embedded default): "
    )
    assert reachable.endswith(
        "; next: nothing listens there: `placewatch run` starts its embedded server there; "
        "or give the server with --nats URL (or PLACEWATCH_NATS)"
    )


def test_no_server_at_the_url_fails_reachability_with_what_to_do(
    fake_gpu: FakeGpuTools,
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS)
    port = free_port()
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{port}", env=fake_gpu.env())
    assert done.returncode == 1
    (reachable,) = lines(done.stdout, "server reachable")
    assert reachable.startswith(f"fail  server reachable: nats://127.0.0.1:{port}: ")
    assert "refused" in reachable
    assert f"; next: check that nats-server runs on 127.0.0.1 port {port}" in reachable
    for name in ("server authenticated", "JetStream", "publish permission"):
        assert lines(done.stdout, name) == [f"skip  {name}: no server reachable"]


def test_a_wrong_password_fails_authentication_and_no_secret_is_printed(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(
        tmp_path / "js", config="authorization { user: n1, password: s3cret-right-pw }\n"
    )
    server.start()
    try:
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "s3cret-wrong-pw"}
        url = server.url.replace("nats://", "nats://n1:s3cret-url-pw@")
        done = run_placewatch("doctor", "--nats", url, env=env)
    finally:
        server.stop()
    assert done.returncode == 1
    (authenticated,) = lines(done.stdout, "server authenticated")
    assert authenticated.startswith(
        "fail  server authenticated: the server refused the credentials"
    )
    assert "Authorization Violation" in authenticated
    assert authenticated.endswith(
        "; next: check the user and password (PLACEWATCH_USER, PLACEWATCH_PASSWORD)"
    )
    (reachable,) = lines(done.stdout, "server reachable")
    assert reachable.startswith(f"ok    server reachable: nats://***@127.0.0.1:{server.port}")
    for secret in ("s3cret-right-pw", "s3cret-wrong-pw", "s3cret-url-pw"):
        assert secret not in done.stdout + done.stderr


def test_a_server_that_wants_credentials_the_node_lacks_names_the_settings(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "js", config="authorization { token: s3cret-token-x }\n")
    server.start()
    try:
        said, connected = checked(Settings(nats=[server.url]))
    finally:
        server.stop()
    assert not connected
    assert said[1:] == [
        "fail  server authenticated: the server refused the credentials (Authorization "
        "Violation); next: the server wants credentials: set user and password, token, "
        "nkey_seed or creds (docs/configuration.md)",
        "skip  JetStream: not connected",
        "skip  streams and buckets: not connected",
        "skip  clock: not connected",
        "skip  publish permission: not connected",
    ]
