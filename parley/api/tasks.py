"""The background tasks' routes (seed 003's tasks): the same Client calls as ``parley task``,
answering the same JSON as its ``--json`` output."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from parley.api.rooms import ClientDep
from parley.shared.models import SEED_SENDER
from parley.shared.tasks import Task

router = APIRouter(tags=["tasks"])


class TaskStart(BaseModel):
    """A background task to start for one of the room's agents."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    what: str = Field(min_length=1, max_length=65_536)
    hand_back: Literal["relay", "post"] | None = None
    by: str = SEED_SENDER


def task_json(task: Task) -> dict[str, Any]:
    """A task as the routes answer it (as `parley task list --json`)."""
    return task.model_dump(mode="json", exclude={"sent", "number"})


@router.post("/rooms/{room}/tasks", status_code=201)
def start_task(room: str, client: ClientDep, body: Annotated[TaskStart, Body()]
               ) -> dict[str, Any]:
    """Start a background task for an agent: it runs off the floor and its result comes
    back by relay or post."""
    return task_json(client.start_task(room, body.agent, body.what, body.hand_back, body.by))


@router.get("/rooms/{room}/tasks")
def list_tasks(room: str, client: ClientDep) -> dict[str, Any]:
    """The room's tasks, oldest first, with their state and result."""
    return {"room": room, "tasks": [task_json(task) for task in client.tasks(room)]}


@router.delete("/rooms/{room}/tasks/{task_id}")
def cancel_task(room: str, task_id: str, client: ClientDep) -> dict[str, Any]:
    """Cancel a task (its id or six hex digits of it); its agent says it was cancelled."""
    return task_json(client.cancel_task(task_id, room))
