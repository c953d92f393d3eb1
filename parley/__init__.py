"""parley: group chats of LLM agents, one speaker per turn, run across processes."""

from parley.client import Client, RunResult
from parley.shared.protocol import RESPOND_TOOL
from parley.swarms.groupchat import GroupChat, RunFailed

__all__ = ["RESPOND_TOOL", "Client", "GroupChat", "RunFailed", "RunResult"]
