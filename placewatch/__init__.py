"""placewatch: tells a GPU fleet where each model shard really computes, over NATS.

The distribution holds four packages, each a folder of the checkout:

- placewatch.schemas (schemas/): the wire contract; msgspec and the standard library only;
- placewatch.worker (worker/): the node agent;
- placewatch.consumer (consumer/): the readers of the bus;
- placewatch (placewatch/): what both sides use (the connection to NATS and how it stops,
  the heartbeat file, what the bus keeps read once, the version) and the command line
  (placewatch.cli), which dispatches to both.

The worker and the consumer never import each other (tests/unit/test_layers.py).
"""

__version__ = "0.1.0"
