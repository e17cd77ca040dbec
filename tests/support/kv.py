"""A KV bucket's keys as its stream stores them, in place of nats-py's `KeyValue.keys()`.

`keys()` watches the bucket and ends at the first entry the server counts as the last; a
client slower than the server (a loaded machine) gets that count at 0 before the entries
arrive and answers that there are none (nats-py 2.x `watchall`: `num_pending == 0 and
received == 0`). The stream's subjects and each one's last message are read by request,
with nothing in flight.
"""

from __future__ import annotations

from nats.js import JetStreamContext

from placewatch.schemas import subjects

GONE = ("DEL", "PURGE")
"""The KV-Operation of a key's last message once it was deleted or purged."""


async def kv_keys(js: JetStreamContext, bucket: str) -> list[str]:
    """The keys `bucket` holds a value of, sorted (none: an empty list)."""
    stream = subjects.kv_stream(bucket)
    info = await js.stream_info(stream, subjects_filter=">")
    prefix = subjects.kv_prefix(bucket)
    keys = []
    for subject in info.state.subjects or {}:
        last = await js.get_last_msg(stream, subject)
        if (last.headers or {}).get("KV-Operation") not in GONE:
            keys.append(subject.removeprefix(prefix))
    return sorted(keys)
