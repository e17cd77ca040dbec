"""The errors a doctor's connection collects, and the refusal each check looks for in them."""

from __future__ import annotations

import anyio
import nats.errors

from placewatch.worker.doctor.server import ServerErrors


def test_refused_is_the_first_permissions_violation_since_a_check_began() -> None:
    errors = ServerErrors()

    async def collect() -> None:
        await errors.record(nats.errors.Error('nats: permissions violation for publish to "a"'))
        await errors.record(nats.errors.Error("nats: maximum payload exceeded"))
        await errors.record(nats.errors.Error('nats: permissions violation for publish to "b"'))
        await errors.record(nats.errors.Error('nats: permissions violation for publish to "c"'))

    anyio.run(collect)
    assert errors.refused(0) == 'permissions violation for publish to "a"'
    assert errors.refused(1) == 'permissions violation for publish to "b"'
    assert errors.refused(4) is None


def test_no_refusal_among_other_errors() -> None:
    errors = ServerErrors([nats.errors.Error("nats: maximum payload exceeded")])
    assert errors.refused(0) is None
