"""parley: group chats of LLM agents, one speaker per turn, run across processes."""

from parley.pool_patch import patch_for_pool

patch_for_pool()  # first: a gevent worker patches socket and ssl before anything imports them

# isort: split
from importlib import import_module  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from parley.client import Client, RunResult
    from parley.shared.protocol import RESPOND_TOOL
    from parley.swarms.groupchat import GroupChat, RunFailed
    from parley.workers.tools.python_tools import tool

# The package's names and the modules that hold them, loaded when first asked for: every
# parley process imports this package, and the keeper, the coordinator and the workers use
# none of them (the client alone takes about half a second to import).
EXPORTS = {
    "Client": "parley.client",
    "RunResult": "parley.client",
    "RESPOND_TOOL": "parley.shared.protocol",
    "GroupChat": "parley.swarms.groupchat",
    "RunFailed": "parley.swarms.groupchat",
    "tool": "parley.workers.tools.python_tools",  # the decorator of a worker's Python tools
}

__all__ = ["RESPOND_TOOL", "Client", "GroupChat", "RunFailed", "RunResult", "tool"]


def __getattr__(name: str) -> Any:
    """``parley.Client`` and the other exports, imported on first use."""
    if name not in EXPORTS:
        raise AttributeError(f"module 'parley' has no attribute {name!r}")
    value = getattr(import_module(EXPORTS[name]), name)
    globals()[name] = value  # asked once: later lookups find it without this hook
    return value
