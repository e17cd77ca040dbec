"""On a real nats-server with a small max_payload: everything still goes out, trimmed."""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from placewatch.schemas import ComputeStatus, decode

from tests.conftest import NatsServer, Worker, clean_env
from tests.integration.test_shards_end_to_end import stream_events
from tests.support.natsproto import RawSubscriber

MAX_PAYLOAD = 1536


def shards_file(path: Path, extra: str = "") -> None:
    huge = "z" * 1024  # the longest pattern a placement may have: its `gone` reason quotes it
    many = "".join(
        f'[[shard]]\nid = "shard-{n:02d}"\nmatch = "no such engine {n}"\ngpus = [0]\n\n'
        for n in range(40)
    )
    path.write_text(
        f'[[shard]]\nid = "huge"\nmatch = "{huge}"\ngpus = {list(range(64))}\n\n{many}{extra}'
    )


def test_a_node_on_a_server_with_a_small_max_payload_still_says_everything(
    tmp_path: Path, workers: list[Worker]
) -> None:
    server = NatsServer(tmp_path / "js", config=f"max_payload: {MAX_PAYLOAD}\n")
    server.start()
    try:
        shards = tmp_path / "shards.toml"
        shards_file(shards)
        args = ("--nats", server.url, "--node", "n1", "--interval", "0.5", "--no-discover")
        with RawSubscriber(server.url, "placewatch.telemetry.>") as sub:
            workers.append(Worker(*args, "--shards", str(shards), env=clean_env()))
            telemetry = sub.next(timeout=10).json()
        assert isinstance(telemetry, dict)
        # 41 shards' verdicts do not fit in what is left of 1536 bytes: some are cut.
        assert telemetry["omitted"]["shards"] > 0
        assert len(telemetry["shards"]) + telemetry["omitted"]["shards"] == 41
        (note,) = [s for s in telemetry["sources"] if s["name"] == "telemetry"]
        assert note["error"].startswith(f"trimmed to fit the server's max_payload ({MAX_PAYLOAD}")

        def stored() -> dict[str, ComputeStatus]:
            events = anyio.run(stream_events, server.url, backend="asyncio")
            return {e.shard: e for e in events if isinstance(e, ComputeStatus)}

        deadline = time.monotonic() + 15
        while len(stored()) < 41 and time.monotonic() < deadline:
            time.sleep(0.2)
        statuses = stored()
        assert len(statuses) == 41  # the huge one did not hold up the 40 behind it
        huge = statuses["huge"]
        assert huge.verdict == "gone" and huge.omitted, huge.reason  # cut, not held back
        assert len(huge.placed_gpus) + huge.omitted.get("placed_gpus", 0) == 64
        assert huge.reason.startswith("no running process matches 'zzzz")

        # A placement added later still reaches the stream.
        shards_file(shards, '[[shard]]\nid = "later"\nmatch = "nothing either"\n')
        deadline = time.monotonic() + 15
        while "later" not in stored() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stored()["later"].verdict == "gone"
        code, _, _, err = workers[-1].stop()
        assert code == 0, err
        assert "trimmed to fit the server's max_payload" in err
    finally:
        server.stop()


def test_decoding_a_trimmed_status_says_what_is_missing() -> None:
    payload = b'{"schema":2,"node":"n","shard":"s","session":"x","time":"2026-12-01T00:00:00Z",'
    payload += b'"placed_gpus":[0,1],"omitted":{"placed_gpus":62}}'
    status = decode(payload, ComputeStatus)
    assert status.omitted == {"placed_gpus": 62}
