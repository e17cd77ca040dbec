"""Inference engines running on the node that nothing placed, and the GPUs they meant to use.

Not every shard has a placement: Ollama starts one runner process per loaded
model, each with its own CUDA_VISIBLE_DEVICES (HIP_/ROCR_VISIBLE_DEVICES on
AMD) and a port of its own, and people start llama-server or vLLM by hand.
Discovery finds them by command line, and reads the GPUs each meant to use
from its device mask and its own flags, so that a runner which came up on
the CPU is caught like a placed shard would be.

- scan.py      walking the processes: discover(), a child that is part of its parent engine
- classify.py  one process as a placement: classify(), Discovered
- endpoint.py  the port and the health URL an engine serves
- intent.py    the GPUs it meant to use: device masks, CPU-on-purpose flags, then the
               engine's own pick (its folder in worker/engines/)
- log_path.py  where its output goes, when that is a file this worker can follow

Which engine a command line starts, its flags and what they mean are the engine's
(worker/engines/).

A device mask that cannot be translated, or runtime device numbers whose
order is not the bus order, are reported in `gpus_unknown`, never guessed;
so is an engine meant for GPUs on a node where no GPU tool answered.
"""

from .classify import Discovered, classify
from .scan import discover, runs_engine

__all__ = ["Discovered", "classify", "discover", "runs_engine"]
