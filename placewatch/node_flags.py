"""The flags of every command that samples this node (run, sample, doctor): one per setting
that a node's command line may give (worker/config.py; docs/configuration.md lists each)."""

from __future__ import annotations

from placewatch.arguments import Parser
from placewatch.worker.config import ENV_CONFIG, GPU_SOURCES


def node_options() -> Parser:
    """The flags of every command that samples this node: run, sample, doctor."""
    common = Parser(add_help=False)
    common.add_argument("--config", metavar="FILE", help=f"TOML settings file (also {ENV_CONFIG})")
    common.add_argument("--node", help="this node's name (default: the short hostname)")
    common.add_argument("--interval", type=float, metavar="SECONDS", help="default 2")
    common.add_argument(
        "--probe-timeout", type=float, metavar="SECONDS", help="limit for one GPU tool run (5)"
    )
    common.add_argument(
        "--gpu-sources",
        metavar="NAMES",
        help=f"GPU sources to read, comma-separated (default {','.join(GPU_SOURCES)})",
    )
    common.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    common.add_argument("--kfd-root", metavar="DIR", help="AMD KFD sysfs tree (/sys/class/kfd/kfd)")
    common.add_argument("--journal-dir", metavar="DIR", help="journal files (default: the node's)")
    common.add_argument(
        "--drm-root",
        metavar="DIR",
        help="Intel GPUs' DRM class folder (/sys/class/drm)",
    )
    common.add_argument(
        "--fdinfo-root", metavar="DIR", help="/proc read for each process's GPU use (/proc)"
    )
    common.add_argument("--shards", metavar="FILE", help="TOML file of [[shard]] placements")
    common.add_argument("--advertise-host", metavar="HOST", help="the node's address for gateways")
    common.add_argument(
        "--grace",
        type=float,
        metavar="SECONDS",
        help="judge a shard without health_url this long after its process started (15)",
    )
    common.add_argument(
        "--no-discover",
        dest="discover",
        action="store_const",
        const=False,
        help="do not look for llama.cpp, Ollama and vLLM processes nothing places",
    )
    common.add_argument(
        "--discover-env", metavar="NAME=VALUE", help="only processes whose environment has it"
    )
    return common
