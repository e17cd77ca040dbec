"""placewatch: a node worker that checks GPU shards compute where they were placed."""

__version__ = "0.1.0"
