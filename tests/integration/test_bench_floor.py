"""The floor `bench/publish_path.py` sets a cold publish against sends what nats-py sends."""

from __future__ import annotations

import anyio

from bench.publish_path import bare_socket, hpub
from bench.synthetic import node_telemetry
from placewatch.connection import connect
from placewatch.schemas import encode, subjects

from tests.conftest import NatsServer
from tests.support.natsproto import RawSubscriber


def test_the_bare_frame_arrives_as_nats_py_publishing_the_same_bytes(
    nats_server: NatsServer,
) -> None:
    message = node_telemetry()
    subject = subjects.telemetry(message.node)
    payload, headers = encode(message)

    async def by_nats_py() -> None:
        nc = await connect([nats_server.url], "test nats-py")
        await nc.publish(subject, payload, headers=headers)
        await nc.flush()
        await nc.close()

    with RawSubscriber(nats_server.url, subject) as sub:
        anyio.run(by_nats_py, backend="asyncio")
        sent_by_nats_py = sub.next(5.0)
        bare = bare_socket(nats_server.url)
        frame = hpub(subject, payload, headers)
        assert bare.send(frame) == len(frame)
        sent_bare = sub.next(5.0)
        bare.close()

    assert sent_bare == sent_by_nats_py
    assert sent_by_nats_py.subject == subject
    assert sent_by_nats_py.headers == headers
    assert sent_by_nats_py.payload == payload
