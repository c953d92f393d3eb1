"""The background tasks' tools an agent may name in its ``tools`` (seed 003's tasks):
``task_status`` and ``cancel_task``, over its own room's tasks. Every worker offers them (a
spec naming them needs no catalog entry); they read and write only the calling room's
tasks."""

from __future__ import annotations

from typing import Any

from parley.shared.tasks import TaskBook, TaskNotFound, notes_line
from parley.shared.tool_catalog import BUILT_IN_TOOLS
from parley.workers.tools.base import ToolDef, ToolError, ToolOptions

TASK_STATUS, CANCEL_TASK = BUILT_IN_TOOLS
TASK_TOOL_NAMES = BUILT_IN_TOOLS
_ID = {"type": "object", "properties": {"task": {
    "type": "string", "description": "The task's id (six hex digits of it are enough)"}}}


class TaskTools:
    """The task tools of one room, as a tool source of its calls' toolbox."""

    def __init__(self, book: TaskBook, room: str) -> None:
        self.book = book
        self.room = room

    def tools(self) -> list[ToolDef]:
        """The two tools' definitions: reading them is idempotent, cancelling is too."""
        return [
            ToolDef(TASK_STATUS, "The room's background tasks and their state; with a task "
                    "id, that task's result or error too.", _ID, ToolOptions(idempotent=True),
                    "parley"),
            ToolDef(CANCEL_TASK, "Cancel one of the room's background tasks.",
                    {**_ID, "required": ["task"]}, ToolOptions(idempotent=True), "parley")]

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """Run the tool on the room's tasks."""
        task_id = str(arguments.get("task") or "").strip()
        try:
            if name == CANCEL_TASK:
                cancelled = self.book.cancel(self.room, task_id)
                return f"task {cancelled.short_id}: cancel asked ({cancelled.status})"
            if task_id:
                task = self.book.get(self.room, task_id)
                return f"{notes_line(task)}\n{task.result or task.error}".strip()
        except TaskNotFound as error:
            raise ToolError(str(error)) from None
        return "\n".join(notes_line(task) for task in self.book.list(self.room)) or "no tasks"
