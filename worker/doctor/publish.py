"""May this node publish its telemetry? Asked with a probe that shows no node anywhere.

A real sample published as the node would show the node in every fleet view
and stay in the telemetry stream as the node's last sample; under the
default node name (the host name) on a machine that runs no worker, that is
a node that does not exist. The probe goes to the exact telemetry subject as
a JetStream publish that expects a last sequence no subject reaches, so a
stream that takes the subject answers and refuses to keep it (nats-server:
10071 wrong last sequence); its body is plain text, never a NodeTelemetry,
so a live subscriber (FleetView, `placewatch watch`) counts it undecodable
and shows nothing.

A publish the credentials may not make comes back only as the server's
`Permissions Violation` to the error callback, and no answer.
"""

from __future__ import annotations

import json

import nats.errors
from nats.aio.client import Client

from placewatch.schemas import NodeInventory, NodeTelemetry, encode, lean, partitions
from placewatch.schemas.codec import HEADER_CONTENT_TYPE, HEADER_TYPE

from ..config import Settings
from ..pipeline import open_pipeline
from .report import Report, count
from .server import NET_TIMEOUT_S, ServerErrors

PUBLISH = "publish permission"
LEAST_PRIVILEGE = "docs/operations.md (Least privilege) lists what a node's credentials need"

PROBE_TYPE = "DoctorProbe"
PROBE_BODY = b"placewatch doctor: may this node publish here? Not a NodeTelemetry; ignore it."
NO_SUCH_SEQUENCE = str(2**63 - 1)
"""A last sequence no subject of any stream reaches, so no stream keeps the probe."""


def probe_headers() -> dict[str, str]:
    return {
        HEADER_CONTENT_TYPE: "text/plain",
        HEADER_TYPE: PROBE_TYPE,
        "Nats-Expected-Last-Subject-Sequence": NO_SUCH_SEQUENCE,
    }


async def check_publish(
    nc: Client, errors: ServerErrors, settings: Settings, report: Report
) -> None:
    """The size of a sample (inventory and telemetry) against max_payload, then the probe
    on the telemetry subject."""
    subject, mapped = partitions.node_subjects("telemetry", settings.node, settings.prefix)
    async with open_pipeline(settings) as pipeline:
        sample = (await pipeline.take()).sample
    sizes = {}
    for message in lean.split(sample):
        sizes[type(message)] = size = len(encode(message, settings.encoding)[0])
        if size > nc.max_payload:
            report.fail(
                PUBLISH,
                f"a {type(message).__name__} is {size} bytes, over the server's max_payload "
                f"({nc.max_payload})",
                "raise max_payload in the server's config",
            )
            return
    seen = len(errors.seen)
    try:
        reply = await nc.request(
            subject, PROBE_BODY, headers=probe_headers(), timeout=NET_TIMEOUT_S
        )
        kept = _kept(reply.data)
    except nats.errors.NoRespondersError:
        kept = "no stream takes that subject and nobody listens"
    except (nats.errors.Error, TimeoutError) as exc:
        refused = errors.refused(seen)
        if refused is not None:
            report.fail(
                PUBLISH,
                f"the server refused a publish on {subject} ({refused})",
                f"allow this user to publish on {subject}, on {mapped} (the servers check a "
                f"partitioned subject as mapped) and this node's other subjects; "
                f"{LEAST_PRIVILEGE}",
            )
            return
        if not isinstance(exc, TimeoutError):
            report.fail(
                PUBLISH,
                f"the publish did not go through ({exc or type(exc).__name__})",
                "check the server's log for this client (placewatch-doctor)",
            )
            return
        kept = "no stream takes that subject; live subscribers got it"
    report.ok(
        PUBLISH,
        f"{subject} allowed: a probe no consumer reads as telemetry went out ({kept}); a "
        f"sample of {settings.node} ({count(len(sample.gpus), 'GPU')}, "
        f"{count(len(sample.shards), 'shard')}) is {sizes[NodeTelemetry]} bytes of telemetry "
        f"and {sizes[NodeInventory]} of inventory, within max_payload",
    )


def _kept(answer: bytes) -> str:
    """What the stream that took the probe did with it, from its answer."""
    try:
        said = json.loads(answer)
    except ValueError:
        return "answered, not by a stream"
    if not isinstance(said, dict):
        return "answered, not by a stream"
    error = said.get("error")
    if isinstance(error, dict):
        stream = f" {said['stream']}" if said.get("stream") else ""
        return f"the stream{stream} refused to keep it: {error.get('description')}"
    return f"the stream {said.get('stream')} kept it as message {said.get('seq')}"
