"""litellm's environment, set by whoever imports litellm, just before: litellm fetches its
model cost map over the network at import unless told not to, and there may be no network.

Every import of litellm in parley (the worker's calls, its background preload, swarms'
token count) calls ``use_local_cost_map()`` first; nothing sets it as a side effect of
importing another module.
"""

from __future__ import annotations

import os

LOCAL_COST_MAP = "LITELLM_LOCAL_MODEL_COST_MAP"


def use_local_cost_map() -> None:
    """Have litellm read the model cost map it ships instead of fetching one; an operator
    who set the variable keeps their value."""
    os.environ.setdefault(LOCAL_COST_MAP, "True")
