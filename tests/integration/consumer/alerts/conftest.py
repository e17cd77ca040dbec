"""Fixtures of the alerts tests: a webhook, `placewatch alerts` processes, a node whose
worker makes a shard fire, change verdict and resolve."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.alerts_cli import Alerts
from tests.support.http_endpoint import Endpoint


@pytest.fixture
def webhook() -> Iterator[Endpoint]:
    hook = Endpoint()
    yield hook
    hook.close()


@pytest.fixture
def alerts() -> Iterator[list[Alerts]]:
    started: list[Alerts] = []
    yield started
    for a in started:
        a.close()
