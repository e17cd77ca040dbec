"""The inference engines placewatch reads, one folder each, behind one protocol.

An engine folder (llama_cpp/, ollama/, vllm/, sglang/) says everything that is that engine's:
how its process and arguments look (`launch`), whose flags these are and which keep it on
the CPU (`cpu_flag`), which GPUs its flags pick (`gpus`), where its output goes first
(`outputs`), how its processes make shards (`children_join_parent`, `served_model`), what
its log lines mean (`log()`: its banner, the lines before it, the prefixes it puts before a
line, and its reader) and what they say of its requests (`requests()`), and the advice only
it needs (`cpu_only_build_fix`, `layers_flag`, `lists_devices`). base.py has the protocol,
registry.py the list; the worker's other packages reach an engine through them alone. What is
the same for every engine stays outside the folders: scanning processes and following their
device masks (shards/discover/); tailing files, weighing findings and following every
shard's log (evidence/, beside the folders).
"""

from .base import (
    Engine,
    EngineLog,
    Intent,
    Launch,
    ModelClaim,
    RequestLine,
    RequestLog,
    Server,
    ServerReports,
)
from .llama_cpp import NAME as LLAMA_CPP
from .ollama import NAME as OLLAMA
from .registry import BY_NAME, ENGINES, engine_named, engine_of, owns_log, read_launch
from .sglang import NAME as SGLANG
from .vllm import NAME as VLLM

__all__ = [
    "BY_NAME",
    "ENGINES",
    "LLAMA_CPP",
    "OLLAMA",
    "SGLANG",
    "VLLM",
    "Engine",
    "EngineLog",
    "Intent",
    "Launch",
    "ModelClaim",
    "RequestLine",
    "RequestLog",
    "Server",
    "ServerReports",
    "engine_named",
    "engine_of",
    "owns_log",
    "read_launch",
]
