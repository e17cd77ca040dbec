"""Shards: where placements come from, which processes are a shard's, what its engine
says, and the verdict on where it really computes."""
