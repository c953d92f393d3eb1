"""What processes agree on by name: Celery task names, the default queue, and the respond
tool every bid forces (seed 001's schema, exactly). The coordinator sends tasks by these
names and never imports the workers' code."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, JsonValue

# One task answers every call kind (bid, select, speak, ...).
CALL_TASK = "parley.call"
# A tool registered with ``queue=`` runs as this task on its queue (workers.tasks).
TOOL_TASK = "parley.tool"
# A background task (seed 003's tasks) runs as this task on its worker agent's queue.
BACKGROUND_TASK = "parley.background"
# Where agents' calls go unless an agent names its own queue.
DEFAULT_QUEUE = "parley.agents"
RESPOND = "respond"

# The respond tool of seed 001, exactly.
RESPOND_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RESPOND,
        "description": (
            "Decide whether to reply in the groupchat. Set score 0..1 for how much "
            "you want to speak. If you don't want to speak, set message to empty string."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "score": {
                    "type": "number",
                    "description": "How much you want to respond (0 = silent, 1 = strongly want to).",
                    "minimum": 0,
                    "maximum": 1,
                },
                "message": {
                    "type": "string",
                    "description": "Your reply to the group, or empty string if you don't want to speak.",
                },
            },
            "required": ["score", "message"],
        },
    },
}

# An intent-mode bid (bid_mode: intent): the respond tool with, instead of the message, one
# short line of what the agent would say; only the turn's winner then writes its message.
INTENT_FIELD = "intent"
RESPOND_INTENT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RESPOND,
        "description": (
            "Decide whether to reply in the groupchat. Set score 0..1 for how much you want "
            "to speak, and intent to one short line of what you would say. If you don't want "
            "to speak, set intent to empty string."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "score": RESPOND_TOOL["function"]["parameters"]["properties"]["score"],
                INTENT_FIELD: {
                    "type": "string",
                    "description": "One short line of what you would say, or empty string "
                                   "if you don't want to speak.",
                },
            },
            "required": ["score", INTENT_FIELD],
        },
    },
}


class ToolRequest(BaseModel):
    """A ``parley.tool`` task: run ``tool`` for the journal's tool call ``record`` (its id,
    agent and arguments) under the caller's ``claim`` (the journal's text of it), within
    ``timeout_s`` and before ``until`` (unix seconds); the result goes to the room's journal
    under ``prefix``."""

    prefix: str
    room: str
    tool: str
    record: dict[str, JsonValue]
    # The room's organization, for the tool metrics' label ("default" from older workers).
    organization: str = "default"
    claim: str
    timeout_s: float
    until: float
