"""Reading the bus as a package: the contract and nats-py, never the worker's own code, so
that a gateway installs no GPU or host sampling to use it."""

from __future__ import annotations

from tests.support.imports import imported_by, top_level

EVERY_MODULE = (
    "placewatch.consumer",
    "placewatch.consumer.fleet",
    "placewatch.connection",
    "placewatch.lifecycle",
    "placewatch.retained",
    "placewatch.consumer.watch.command",
    "placewatch.consumer.watch.console",
    "placewatch.consumer.alerts",
    "placewatch.consumer.alerts.alertmanager",
    "placewatch.consumer.alerts.catchup",
    "placewatch.consumer.alerts.consume",
    "placewatch.consumer.alerts.options",
    "placewatch.consumer.alerts.reconcile",
    "placewatch.consumer.alerts.sinks",
    "placewatch.consumer.alerts.webhook",
)


def test_no_worker_module_is_imported() -> None:
    imported = imported_by(*EVERY_MODULE)
    ours = {name for name in imported if name.split(".")[0] == "placewatch"}
    outside = {
        name for name in ours if not name.startswith(("placewatch.consumer", "placewatch.schemas"))
    }
    # What a consumer loads beside its own: the shared package, never the worker or the CLI.
    assert outside == {
        "placewatch",
        "placewatch.arguments",
        "placewatch.backoff",
        "placewatch.connection",
        "placewatch.heartbeat",
        "placewatch.http_opener",
        "placewatch.lifecycle",
        "placewatch.retained",
    }


def test_nor_the_workers_dependencies() -> None:
    imported = top_level(imported_by(*EVERY_MODULE))
    assert "nats" in imported
    assert {"psutil", "pynvml", "nkeys"}.isdisjoint(imported)
