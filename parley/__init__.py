"""parley: group chats of LLM agents, one speaker per turn, run across processes."""

from parley.client import Client, RunResult

__all__ = ["Client", "RunResult"]
