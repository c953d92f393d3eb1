"""An ACP agent for the tests, written with the ``agent-client-protocol`` package: started
from a profile, it answers the message it is asked about by what that message says.

- every answer starts ``session <id> prompt <n>:`` and streams in several chunks;
- ``tool`` in the message: it reports a tool call (``grep``), started then completed;
- ``permission`` in the message: it asks to write a file, and says what it was told;
- ``slow`` in the message: it writes a chunk every 0.1 s until cancelled (``session/cancel``);
- ``stall`` in the message: its first prompt to read one writes a chunk every 0.1 s until
  cancelled, then goes on writing ``wrapping up`` for 0.5 s before it ends (``stalled``
  marks it); later ones take 0.3 s to answer;
- ``env`` in the message: it lists the environment variables it was started with;
- ``die`` in the message: its first process to read one exits at once (``died`` marks it);
- every prompt it reads is appended to ``prompts.log`` in its working directory.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)


class TestAgent:
    """The agent: one counter of prompts per session."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.prompts: dict[str, int] = {}
        self.cancelled: set[str] = set()

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session = uuid.uuid4().hex[:8]
        self.prompts[session] = 0
        return NewSessionResponse(session_id=session)

    async def cancel(self, session_id: str, **_: Any) -> None:
        self.cancelled.add(session_id)

    async def say(self, session: str, text: str) -> None:
        await self.conn.session_update(session_id=session, update=update_agent_message_text(text))

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        with Path("prompts.log").open("a", encoding="utf-8") as log:
            log.write(f"--- session {session_id}\n{text}\n")
        self.prompts[session_id] += 1
        asked = text.rsplit("The message you answer:", 1)[-1].lower()
        await self.say(session_id, f"session {session_id} prompt {self.prompts[session_id]}:")
        if "die" in asked and not Path("died").exists():
            Path("died").touch()
            os._exit(1)
        if "stall" in asked and not Path("stalled").exists():
            Path("stalled").touch()
            while session_id not in self.cancelled:
                await self.say(session_id, " working")
                await asyncio.sleep(0.1)
            for _ in range(5):  # an agent that takes a moment to stop
                await self.say(session_id, " wrapping up")
                await asyncio.sleep(0.1)
            self.cancelled.discard(session_id)
            return PromptResponse(stop_reason="cancelled")
        if "stall" in asked:
            await asyncio.sleep(0.3)
        if "slow" in asked:
            while session_id not in self.cancelled:
                await self.say(session_id, " working")
                await asyncio.sleep(0.1)
            self.cancelled.discard(session_id)
            return PromptResponse(stop_reason="cancelled")
        if "tool" in asked:
            await self.conn.session_update(session_id=session_id, update=start_tool_call(
                "t1", "grep", kind="search", status="in_progress", raw_input={"pattern": "tax"}))
            await self.conn.session_update(session_id=session_id, update=update_tool_call(
                "t1", status="completed", raw_output="3 matches"))
            await self.say(session_id, " grep found 3 matches")
        if "permission" in asked:
            await self.say(session_id, await self.ask_permission(session_id))
        if "env" in asked:
            await self.say(session_id, " env " + ",".join(sorted(os.environ)))
        await self.say(session_id, " done.")
        return PromptResponse(stop_reason="end_turn")

    async def ask_permission(self, session: str) -> str:
        options = [PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                   PermissionOption(option_id="no", name="Reject", kind="reject_once")]
        answer = await self.conn.request_permission(
            session_id=session, options=options,
            tool_call=ToolCallUpdate(tool_call_id="w1", title="write notes.txt",
                                     raw_input={"path": "notes.txt"}))
        chosen = getattr(answer.outcome, "option_id", None)
        return " permission granted" if chosen == "yes" else " permission refused"


if __name__ == "__main__":
    asyncio.run(run_agent(TestAgent()))
