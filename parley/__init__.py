"""parley: group chats of LLM agents, one speaker per turn, run across processes."""

from parley.pool_patch import patch_for_pool

patch_for_pool()  # first: a gevent worker patches socket and ssl before anything imports them

# isort: split
from typing import Any  # noqa: E402

from parley.client import Client, RunResult  # noqa: E402
from parley.shared.protocol import RESPOND_TOOL  # noqa: E402
from parley.swarms.groupchat import GroupChat, RunFailed  # noqa: E402

__all__ = ["RESPOND_TOOL", "Client", "GroupChat", "RunFailed", "RunResult", "tool"]


def __getattr__(name: str) -> Any:
    """``parley.tool``, the decorator of a worker's Python tools, loaded when first asked
    for: ``import parley`` stays free of the workers' code."""
    if name == "tool":
        # Put off: only a tools module needs the workers' code, and it asks for it by name.
        from parley.workers.tools.python_tools import tool

        return tool
    raise AttributeError(f"module 'parley' has no attribute {name!r}")
