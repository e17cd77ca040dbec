"""The node agent: samples the GPUs and the host, judges where each shard computes, and
publishes it. Imports the contract (placewatch.schemas) and the shared package
(placewatch), never the consumer."""
