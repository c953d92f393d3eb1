"""Messages written from tool calls, committed as a coordinator commits them (a turn opened
and committed with RoomIO through the real scripts), for tests of how tool calls are kept
and told without running a tool loop."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from parley.coordinator.lease import Leases
from parley.coordinator.policies.base import Decision
from parley.coordinator.room_io import InboxLimits, RoomIO
from parley.shared.keys import Keys
from parley.shared.models import (
    Answer,
    CallKind,
    RoomSpec,
    ToolCallRecord,
    ToolCallStatus,
    TurnRecord,
)
from parley.shared.scripts import Scripts


def tool_call(index: int = 0, tool: str = "search_logs", agent: str = "Investigator",
              result: str = "12 lines", **update: Any) -> ToolCallRecord:
    """``agent``'s call number ``index`` of ``tool``, on the checkout service."""
    fields: dict[str, Any] = {"arguments": {"service": "checkout"}, "duration_ms": 12.5,
                              "status": ToolCallStatus.OK, **update}
    return ToolCallRecord(id=f"1.1.1.0.{index}", agent=agent, tool=tool, result=result,
                          index=index, **fields)


async def commit_tool_message(client: Any, keys: Keys, room: str, sender: str, content: str,
                              calls: list[ToolCallRecord], shared: bool = True,
                              result_max_bytes: int = 16_384) -> int:
    """Move the room's inbox to its log, open a turn and commit ``sender``'s ``content``,
    written from ``calls``, as RoomRunner.commit does, then hand the room over (due now,
    its run going on); returns the message's seq."""
    scripts = Scripts(client)
    io = RoomIO(client, keys, scripts, limits=InboxLimits(65_536, 100, 1024, 0,
                                                          result_max_bytes))
    leases = Leases(client, keys, scripts, "c-tools", 30.0)
    lease = await leases.acquire(room)
    assert lease is not None, f"{room} is held"
    try:
        await io.drain_inbox(lease)
        turn = await io.open_turn(lease, 30.0)
        assert turn is not None
        answer = Answer(agent=sender, turn=turn.number, kind=CallKind.SPEAK, phase=1,
                        message=content, tool_calls=calls)
        record = TurnRecord(turn=turn.number, run=1, run_turns=turn.number, epoch=lease.epoch,
                            snapshot_seq=turn.snapshot_seq, messages_in_run=1, recent=[],
                            bids=[Answer(agent="Selector", turn=turn.number,
                                         kind=CallKind.SELECT, message=sender), answer],
                            winner=sender)
        decision = Decision(winner=sender, message=content, recent=(sender,))
        seq, _ = await io.commit(lease, record, decision, 1000, shared_tool_results=shared)
        return seq
    finally:
        # Handed over as a stopping coordinator hands its rooms over: due at once.
        await leases.release(lease)
        await io.set_runnable(room, True)


def commit_tool_message_now(client: Any, *args: Any, **kwargs: Any) -> int:
    """commit_tool_message from plain code, on an asyncio client made by ``client()``: on
    a thread of its own, so that it also runs beside an event loop (playwright's)."""

    async def run() -> int:
        async_client = client()
        try:
            return await commit_tool_message(async_client, *args, **kwargs)
        finally:
            await async_client.aclose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def incident_spec(tool_results: str = "shared") -> RoomSpec:
    """A selector room of the investigator and the SRE (scripted, silent), whose messages
    tool_messages commits."""
    return RoomSpec.model_validate({
        "name": "incident", "tool_results": tool_results,
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": []}},
        "agents": [{"name": name, "model": "scripted", "script": []}
                   for name in ("Investigator", "SRE")]})
