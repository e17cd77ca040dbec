"""On a shared cluster: credentials, TLS, least privilege, and no secret in any output."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import anyio
import nats
import nkeys
import pytest

from placewatch.schemas import streams as contract
from placewatch.schemas import subjects
from placewatch.worker.bus.outbox import EventOutbox
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket, ensure_stream

from tests.conftest import (
    FIXTURES,
    GPU0,
    ROOT,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    clean_env,
    run_placewatch,
    start,
    wait_older_than,
)
from tests.support.certs import make_certs, needs_openssl
from tests.support.eventually import eventually
from tests.support.http_endpoint import Endpoint
from tests.support.natsproto import Message, RawSubscriber

ADMIN = "{user: admin, password: adminpw}"


def node_permissions(node: str, password: str) -> str:
    """The permission block of docs/operations.md, for one node: the test runs what the docs say."""
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"<!-- node-permissions -->\s*```\n(.*?)```", doc, re.S)
    assert block, "docs/operations.md lost its node-permissions block"
    text = block.group(1).replace("$NODE_PASSWORD", password).replace("NODE", node)
    return text.replace("users = [", f"users = [\n    {ADMIN}", 1)


async def create_streams_as_admin(url: str) -> None:
    """What docs/operations.md has an operator create once, made as the worker makes it."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        js = nc.jetstream()
        for stream in contract.STREAMS:
            await ensure_stream(js, stream, StreamSettings())
        for bucket in contract.BUCKETS:
            await ensure_bucket(js, bucket, StreamSettings())
    finally:
        await nc.close()


def test_least_privilege_works_and_another_nodes_subjects_are_refused(
    tmp_path: Path, workers: list[Worker]
) -> None:
    server = NatsServer(tmp_path / "js", config=node_permissions("n1", "n1pw"))
    server.start()
    try:
        anyio.run(create_streams_as_admin, server.url, backend="asyncio")
        env = clean_env() | {
            "PLACEWATCH_USER": "n1",
            "PLACEWATCH_PASSWORD": "n1pw",
            "PLACEWATCH_CREATE": "false",
        }
        worker = Worker(
            "--nats", server.url, "--node", "n1", "--interval", "1", "--no-discover", env=env
        )
        workers.append(worker)

        async def check() -> None:
            nc = await nats.connect(server.url, user="admin", password="adminpw")
            try:
                js = nc.jetstream()
                kv = await js.key_value("placewatch_placements")
                await kv.put("n1.init", json.dumps({"id": "init", "pid": 1, "gpus": [0]}).encode())
                with anyio.fail_after(10):
                    while (await js.stream_info("PLACEWATCH_EVENTS")).state.messages < 1:
                        await anyio.sleep(0.2)
                    # The tick that published the event publishes its telemetry after it.
                    while (await js.stream_info("PLACEWATCH_TELEMETRY")).state.messages < 1:
                        await anyio.sleep(0.2)
                assert (await js.stream_info("PLACEWATCH_TELEMETRY")).state.messages == 1
                reply = await nc.request("placewatch.service.n1.shards", b"", timeout=3)
                assert [s["shard"] for s in json.loads(reply.data)] == ["init"]
                computed = await (await js.key_value("placewatch_compute")).get("n1.init")
                assert computed.value is not None
            finally:
                await nc.close()

        anyio.run(check, backend="asyncio")
        code, _, _, err = worker.stop()
        assert code == 0
        assert "refused" not in err, err

        async def carried_over() -> list[str]:
            """What a restarted worker reads of this session, with the node's permissions."""
            nc = await nats.connect(
                server.url, user="n1", password="n1pw", inbox_prefix=subjects.inbox("n1")
            )
            try:
                return [s.shard for s in await EventOutbox(nc).previous("n1")]
            finally:
                await nc.close()

        assert anyio.run(carried_over, backend="asyncio") == ["init"]

        # The same credentials, posing as another node: the server refuses it the replies to
        # that node's inbox, so it cannot take that node's lease and publishes nothing for it;
        # it says so, once, and keeps running.
        impostor = Worker(
            "--nats", server.url, "--node", "n2", "--interval", "1", "--no-discover",
            "--log-level", "debug", env=env,
        )  # fmt: skip
        workers.append(impostor)
        impostor.wait_for("nothing is published until it is taken")
        # Three more tries to take the lease (one a second), each said at DEBUG only.
        eventually(lambda: impostor.err().count("still cannot take node n2's lease") >= 3)
        assert impostor.proc.poll() is None, "the worker stopped on a refusal"
        code, _, _, err = impostor.stop()
        assert code == 0
        assert 'NATS refused it: permissions violation for subscription to "_inbox.n2.' in err
        assert err.count("cannot take node n2's lease in KV placewatch_leases yet") == 1, err
        assert "nothing is published until it is taken" in err
        assert "publish to" not in err  # it tried to publish nothing

        async def telemetry_kept() -> int:
            nc = await nats.connect(server.url, user="admin", password="adminpw")
            try:
                info = await nc.jetstream().stream_info("PLACEWATCH_TELEMETRY")
                return info.state.messages
            finally:
                await nc.close()

        assert anyio.run(telemetry_kept, backend="asyncio") == 1  # n1's; none of n2
        assert "n1pw" not in err
    finally:
        server.stop()


def test_a_wrong_password_is_reported_without_any_secret(
    tmp_path: Path, workers: list[Worker]
) -> None:
    server = NatsServer(
        tmp_path / "js", config="authorization { user: n1, password: right-secret }\n"
    )
    server.start()
    try:
        env = clean_env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "wrong-secret"}
        worker = Worker(
            "--nats",
            server.url.replace("nats://", "nats://n1:url-secret@"),
            "--node",
            "n1",
            env=env,
        )
        workers.append(worker)
        worker.wait_for("cannot reach NATS")
        assert worker.proc.poll() is None
        code, _, out, err = worker.stop()
        assert code == 0
        assert "cannot reach NATS" in err and "uthorization" in err
        for secret in ("right-secret", "wrong-secret", "url-secret"):
            assert secret not in err + out
    finally:
        server.stop()


@pytest.mark.parametrize("auth", ["token", "nkey"])
def test_token_and_nkey_credentials(tmp_path: Path, workers: list[Worker], auth: str) -> None:
    env = clean_env()
    if auth == "token":
        config = "authorization { token: s3cr3t-token }\n"
        env["PLACEWATCH_TOKEN"] = "s3cr3t-token"
    else:
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        public = nkeys.from_seed(bytearray(seed)).public_key.decode()
        (tmp_path / "node.nk").write_bytes(seed)
        config = f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n'
        env["PLACEWATCH_NKEY_SEED"] = str(tmp_path / "node.nk")
    server = NatsServer(tmp_path / "js", config=config)
    server.start()
    try:
        sub_auth = {"auth_token": "s3cr3t-token"} if auth == "token" else None
        worker = Worker(
            "--nats", server.url, "--node", "n1", "--interval", "1", "--no-discover", env=env
        )
        workers.append(worker)
        if sub_auth is None:
            worker.wait_for("connected to NATS")
            code, _, _, err = worker.stop()
            assert code == 0 and "cannot reach NATS" not in err, err
            assert "connected to NATS" in err
            return
        with RawSubscriber(server.url, "placewatch.telemetry.n1", connect_extra=sub_auth) as sub:
            assert json.loads(sub.next(timeout=5).payload)["node"] == "n1"
        code, _, _, err = worker.stop()
        assert code == 0 and "s3cr3t-token" not in err
    finally:
        server.stop()


@needs_openssl
def test_mutual_tls(tmp_path: Path, workers: list[Worker]) -> None:
    certs = make_certs(tmp_path)
    config = (
        f'tls {{\n  cert_file: "{certs["server.pem"]}"\n  key_file: "{certs["server.key"]}"\n'
        f'  ca_file: "{certs["ca.pem"]}"\n  verify: true\n  timeout: 2\n}}\n'
    )
    server = NatsServer(tmp_path / "js", config=config)
    server.start()
    try:
        env = clean_env() | {"PLACEWATCH_TLS_CA": str(certs["ca.pem"])}
        # Without a client certificate the server turns it away; the worker keeps trying.
        lacking = Worker("--nats", server.url.replace("nats://", "tls://"), "--node", "n1", env=env)
        workers.append(lacking)
        lacking.wait_for("cannot reach NATS")
        code, _, _, err = lacking.stop()
        assert code == 0 and "cannot reach NATS" in err

        env |= {
            "PLACEWATCH_TLS_CERT": str(certs["client.pem"]),
            "PLACEWATCH_TLS_KEY": str(certs["client.key"]),
        }
        worker = Worker(
            "--nats",
            server.url.replace("nats://", "tls://"),
            "--node",
            "n1",
            "--interval",
            "1",
            env=env,
        )
        workers.append(worker)
        worker.wait_for("connected to NATS at tls://127.0.0.1")
        code, _, _, err = worker.stop()
        assert code == 0
        assert "cannot reach" not in err
    finally:
        server.stop()


def test_a_missing_credentials_file_exits_2_naming_the_setting(tmp_path: Path) -> None:
    done = run_placewatch(
        "run", "--nats", "nats://127.0.0.1:1", "--creds", str(tmp_path / "absent.creds")
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"placewatch: creds: {tmp_path / 'absent.creds'} cannot be read (No such file or directory); check the path and its permissions"
    )


URL_SECRET = "s3cret-in-a-url"


def hostile_shards(tmp_path: Path, pids: list[int], engine: str) -> Path:
    """Placements whose health URLs hold secrets: in the query, before `@`, or both."""
    urls = [
        f"{engine}/health?token={URL_SECRET}&access_token={URL_SECRET}&x=1",
        f"http://ops:{URL_SECRET}@127.0.0.1:1/health?key={URL_SECRET}",
        f"http://ops:{URL_SECRET}@127.0.0.1:80x/health?sig={URL_SECRET}",  # refused: no port
    ]
    shards = tmp_path / "shards.toml"
    shards.write_text(
        "".join(
            f'[[shard]]\nid = "s{i}"\npid = {pid}\ngpus = [0]\nhealth_url = "{url}"\n'
            for i, (pid, url) in enumerate(zip(pids, urls, strict=True))
        )
    )
    return shards


def test_no_secret_in_a_url_reaches_telemetry_statuses_logs_or_doctor(
    tmp_path: Path,
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    workers: list[Worker],
    shard_procs: dict[str, subprocess.Popen[bytes]],
) -> None:
    engine = Endpoint(status=200)
    pids = [start(shard_procs, f"s{i}") for i in range(3)]
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({p: (GPU0, 3000) for p in pids})
    )
    shards = hostile_shards(tmp_path, pids, engine.base)
    wait_older_than(pids, 1.2)
    args = ("--shards", str(shards), "--grace", "1", "--no-discover", "--log-level", "debug")
    seen: list[Message] = []
    try:
        with RawSubscriber(nats_server.url, "placewatch.>") as sub:
            worker = Worker(
                "--nats", nats_server.url, "--node", "n1", "--interval", "1", *args,
                env=fake_gpu.env(),
            )  # fmt: skip
            workers.append(worker)
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    seen.append(sub.next(timeout=deadline - time.monotonic()))
        code, _, out, err = worker.stop()
        sample = run_placewatch("sample", "--node", "n1", *args, env=fake_gpu.env())
        doctor = run_placewatch(
            "doctor", "--nats", nats_server.url, "--node", "n1", *args, env=fake_gpu.env()
        )
    finally:
        engine.close()
    assert code == 0
    # The health URL was asked, with its token: the shard was judged on it.
    assert f"/health?token={URL_SECRET}&access_token={URL_SECRET}&x=1" in [
        r.path for r in engine.requests
    ]
    published = [json.loads(m.payload) for m in seen if ".compute." in m.subject]
    statuses = {s["shard"]: s["verdict"] for s in published}
    # s2 refused (its port is no number), and told so on its own key
    assert statuses == {"s0": "gpu", "s1": "starting", "s2": "unknown"}
    assert "`health_url` has a port that is not a number" in err
    assert any(b"`health_url` has a port that is not a number" in m.payload for m in seen)
    everything = [err, out, sample.stdout, sample.stderr, doctor.stdout, doctor.stderr]
    assert not [text for text in everything if URL_SECRET in text]
    assert not [m for m in seen if URL_SECRET in repr(m.headers) + m.payload.decode()]
