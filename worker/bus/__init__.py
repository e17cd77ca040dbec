"""The node's side of the bus: its connection settings, publishing, the events outbox, the
streams and buckets it keeps, following a KV bucket, and its micro service."""
