"""Background tasks (seed 003's tasks): ``parley task start``, ``task list`` and
``task cancel``."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly
from parley.shared.tasks import Task, one_line
from parley.views.terminal_text import terminal_text

app = typer.Typer(no_args_is_help=True, help="Background tasks: long work off the floor.")


def task_json(task: Task) -> dict[str, object]:
    """A task as the commands' --json shows it."""
    return task.model_dump(mode="json", exclude={"sent", "number"})


def task_line(task: Task, now: float) -> str:
    """A task's one line: its id, agent and worker, state, and what it does."""
    took = (task.finished_at or now) - task.started_at
    state = task.status.replace("_", " ")
    if task.progress:
        state += f" ({one_line(task.progress, 40)})"
    line = (f"{task.short_id}  {task.agent} (by {task.worker}, {task.hand_back})  "
            f"{state}, {took:.0f} s  {one_line(task.instruction, 60)}")
    if task.result:
        line += f"\n        result: {one_line(task.result, 100)}"
    elif task.error:
        line += f"\n        {one_line(task.error, 100)}"
    return terminal_text(line)


@app.command()
@friendly
def start(room: Annotated[str, typer.Argument(help="The room's id")],
          agent: Annotated[str, typer.Argument(help="The agent the task is for")],
          what: Annotated[str, typer.Argument(help="What to do")],
          hand_back: Annotated[str | None, typer.Option(
              "--hand-back", help="post: the result as it is, as the agent's message; relay: "
              "the agent says it in a turn of its own (default: the agent's background)")] = None,
          as_json: JsonFlag = False) -> None:
    """Start a background task for AGENT: its worker does WHAT off the floor while the room
    goes on, and the result comes back when done."""
    task = common.connect().start_task(room, agent, what, hand_back)
    if as_json:
        print_json(task_json(task))
    else:
        print(terminal_text(f"task {task.short_id} started for {agent} in room {room} "
                            f"(worked by {task.worker}, hand-back {task.hand_back})"))


@app.command("list")
@friendly
def list_tasks(room: Annotated[str, typer.Argument(help="The room's id")],
               as_json: JsonFlag = False) -> None:
    """The room's background tasks, oldest first: state, result or error."""
    tasks = common.connect().tasks(room)
    if as_json:
        print_json([task_json(task) for task in tasks])
        return
    now = time.time()
    for task in tasks:
        print(task_line(task, now))
    if not tasks:
        print(f"room {room} has no tasks")


@app.command()
@friendly
def cancel(task_id: Annotated[str, typer.Argument(
               metavar="TASK", help="The task's id (six hex digits of it are enough)")],
           room: Annotated[str | None, typer.Option(help="The task's room (default: any)")] = None,
           as_json: JsonFlag = False) -> None:
    """Cancel a task wherever it runs; its agent says it was cancelled."""
    task = common.connect().cancel_task(task_id, room)
    if as_json:
        print_json(task_json(task))
    elif task.is_open:
        print(terminal_text(f"task {task.short_id} in room {task.room}: cancel asked"))
    else:
        print(terminal_text(f"task {task.short_id} in room {task.room}: {task.status}"))
