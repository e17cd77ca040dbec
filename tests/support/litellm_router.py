"""LiteLLM for tests: imported without reaching the network, and a Router over base URLs.

litellm fetches its model cost map from the web when imported unless told to use the copy it
ships (LITELLM_LOCAL_MODEL_COST_MAP), and retries for seconds where there is no route. A test
that needs it skips loudly when it is not installed (`pip install -e '.[test]'` brings it).
"""

from __future__ import annotations

import os
from typing import Any

import pytest


def litellm_or_skip() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    return pytest.importorskip(
        "litellm", reason="LiteLLM is not installed: pip install -e '.[test]' (or '.[litellm]')"
    )


def router(group: str, bases: list[str]) -> Any:
    """A real Router with one OpenAI-compatible deployment of `group` per base URL, no
    retries or cooldowns of its own (what it does is the filter's)."""
    litellm = litellm_or_skip()
    return litellm.Router(
        model_list=[
            {
                "model_name": group,
                "litellm_params": {"model": "openai/tiny", "api_base": base, "api_key": "none"},
                "model_info": {"id": f"{group}-{n}"},
            }
            for n, base in enumerate(bases)
        ],
        num_retries=0,
        disable_cooldowns=True,
    )


def served_by(response: Any) -> str:
    """The base URL of the deployment that served `response`."""
    return str(response._hidden_params["api_base"])
