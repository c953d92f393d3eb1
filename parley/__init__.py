"""parley: group chats of LLM agents, one speaker per turn, run across processes."""

from typing import Any

from parley.client import Client, RunResult
from parley.shared.protocol import RESPOND_TOOL
from parley.swarms.groupchat import GroupChat, RunFailed

__all__ = ["RESPOND_TOOL", "Client", "GroupChat", "RunFailed", "RunResult", "tool"]


def __getattr__(name: str) -> Any:
    """``parley.tool``, the decorator of a worker's Python tools, loaded when first asked
    for: ``import parley`` stays free of the workers' code."""
    if name == "tool":
        # Put off: only a tools module needs the workers' code, and it asks for it by name.
        from parley.workers.tools.python_tools import tool

        return tool
    raise AttributeError(f"module 'parley' has no attribute {name!r}")
