"""placewatch: tells a GPU fleet where each model shard really computes, over NATS.

The distribution holds four packages, each a folder of the checkout:

- placewatch.schemas (schemas/): the wire contract; msgspec and the standard library only;
- placewatch.worker (worker/): the node agent;
- placewatch.consumer (consumer/): the readers of the bus;
- placewatch (placewatch/): what both sides use (the connection to NATS and how it stops,
  the heartbeat file, what the bus keeps read once, the version) and the command line
  (placewatch.cli), which dispatches to both.

The worker and the consumer never import each other (tests/unit/test_layers.py).

Run from a checkout's root, `python -m placewatch` finds this folder before any install, and
the other three packages are its siblings there, not its subfolders as an install lays them
out: the package's path then takes in the checkout's root, so that they import from the same
checkout (an install, whose folders nest, needs nothing).
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and all(
    (_checkout / name / "__init__.py").is_file() for name in ("schemas", "worker", "consumer")
):
    __path__.append(str(_checkout))
