"""Prometheus metrics as both sides serve them: the worker its own node's (`placewatch run
--metrics-listen`), the fleet exporter every node it reads from the bus (`placewatch
exporter`). The names, labels and units are one table (metrics.py), one node's families are
built one way (families.py) and served by one bounded HTTP server (server.py)."""
