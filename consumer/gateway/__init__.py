"""placewatch's word in a gateway's routing: the backends to take off the road, and when.

- backends.py   which base URLs to avoid now, from each shard's status and its node's silence
- decisions.py  a request's candidates less those, each change logged once and counted
- litellm.py    LiteLLM's Router: a routing filter (`placewatch[litellm]`; imported only by
                a gateway that uses it)
"""

from .backends import AVOIDED_VERDICTS, BadBackends, Policy, Why
from .decisions import GroupFilter

__all__ = ["AVOIDED_VERDICTS", "BadBackends", "GroupFilter", "Policy", "Why"]
