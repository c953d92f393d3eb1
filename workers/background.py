"""The ``parley.background`` task: work one background task off the floor (seed 003's
"Talking and working: tasks").

The worker agent answers one call over the parent room's last messages and the task's
instruction, with its tools, until it answers or the task's max_s passes. The call runs in
the task's own room (created as the task is taken): its tool journal, an ACP agent's
session, its conversation and totals are that room's. Meanwhile this loop beats the task's
heartbeat and looks for a cancel; the result is handed back by task_finish.lua, exactly
once.
"""

from __future__ import annotations

import contextvars
import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, TimeoutError
from functools import cache

import redis
import structlog

from parley.shared.keys import Keys
from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    AnswerStatus,
    CallKind,
    CallRequest,
    Message,
    RoomSpec,
    ToolCallRecord,
)
from parley.shared.protocol import BACKGROUND_TASK
from parley.shared.records import cap_bytes
from parley.shared.tasks import HISTORY_MESSAGES, Task, TaskBook, task_room_spec
from parley.workers.app import app, settings
from parley.workers.calls import Call, answer_call
from parley.workers.prompts import task_caller
from parley.workers.tasks import _redis, external_turn, store_for, tool_run

log = structlog.get_logger("parley.worker")

# Tasks run for minutes or hours: each on its own thread, so that the Celery slot's loop
# stays free to beat and to see a cancel.
_tasks = ThreadPoolExecutor(max_workers=256, thread_name_prefix="background-task")


@cache
def book_for(prefix: str) -> TaskBook:
    """The task book under the request's key prefix."""
    return TaskBook(_redis(), Keys(prefix), settings.events_stream_maxlen,
                    settings.task_finished_max)


@app.task(name=BACKGROUND_TASK)
def work_task(request: dict) -> None:
    """Work the task named by ``request`` (prefix, room, task id), if it is still queued."""
    prefix, room, task_id = request["prefix"], request["room"], request["task"]
    book = book_for(prefix)
    if not book.claim(room, task_id):
        log.info("task_not_taken", room=room, task=task_id)
        return
    task = book.get(room, task_id)
    store = store_for(prefix)
    _, spec = store.read_spec(room)
    organization = store.organization_of(room) or ""
    messages = store.read_messages(room)[-HISTORY_MESSAGES:]
    with structlog.contextvars.bound_contextvars(room=room, task=task_id):
        book.open_room(task, spec, organization, [(m.sender, m.content) for m in messages])
        log.info("task_running", agent=task.agent, worker=task.worker, task_room=task.room_id)
        status, result, error, usage = watch(book, task, prefix, spec, messages,
                                             organization)
        result = cap_bytes(result, settings.task_result_max_bytes)
        book.close_room(task, result, usage)
        book.finish(room, task, status, result, error, usage)
        log.info("task_finished", status=status)


def watch(book: TaskBook, task: Task, prefix: str, spec: RoomSpec, messages: list[Message],
          organization: str) -> tuple[str, str, str, tuple[int, int, float]]:
    """Run the task's call on its own thread and beat until it answers, is cancelled or
    passes its deadline: (status, result, error, usage)."""
    future = _tasks.submit(contextvars.copy_context().run, work, task, prefix,
                           task_room_spec(spec, task), messages, organization)
    while True:
        try:
            return future.result(timeout=settings.task_heartbeat_s)
        except TimeoutError:
            pass
        running, cancel = book.beat(task.room, task.id)
        if cancel or not running:
            return "cancelled", "", "cancelled", (0, 0, 0.0)
        if time.time() > task.deadline:
            max_s = round(task.deadline - task.started_at)
            return "timed_out", "", f"ran past its max_s ({max_s} s)", (0, 0, 0.0)


def work(task: Task, prefix: str, spec: RoomSpec, messages: list[Message], organization: str
         ) -> tuple[str, str, str, tuple[int, int, float]]:
    """The worker agent's one call for the task, in the task's room (``spec`` is that
    room's), with its tools: its answer is the result."""
    store = store_for(prefix)
    agent = task_caller(spec.agent(task.worker), task.instruction)
    # The call is numbered by the task (a scripted worker's k-th task replays entry k); its
    # tool journal and an ACP agent's session are the task's room's, apart from the
    # parent's turns.
    request = CallRequest(prefix=prefix, room=task.room_id, turn=task.number, attempt=1,
                          agents=[task.worker], kind=CallKind.SPEAK, phase=0,
                          snapshot_seq=0, deadline=task.deadline, spec_version=0,
                          organization=organization or DEFAULT_ORGANIZATION)
    call = Call(turn=task.number, attempt=1, kind=CallKind.SPEAK, number=task.number,
                instruction=task.instruction)
    tools = tool_run(store, spec, request, agent, lambda: messages)
    if tools is not None:
        tools.on_ended = progress_of(book_for(prefix), task)
    answer = answer_call(agent, spec.agents, call, lambda: messages, task.deadline,
                         settings=settings, tools=tools,
                         external=external_turn(store, spec, request, agent))
    usage = (answer.prompt_tokens or 0, answer.completion_tokens or 0, answer.cost_usd or 0.0)
    if answer.status is AnswerStatus.OK and answer.message:
        return "done", answer.message, "", usage
    if answer.status is AnswerStatus.TIMEOUT:
        return "timed_out", "", answer.error or "ran past its max_s", usage
    return "failed", "", answer.error or "the worker gave no result", usage


def progress_of(book: TaskBook, task: Task) -> Callable[[ToolCallRecord], None]:
    """What tells the task's progress after each of its tool calls, through its heartbeat
    (a task_progress event each time it changes)."""
    calls = itertools.count(1)

    def report(record: ToolCallRecord) -> None:
        try:
            book.beat(task.room, task.id, f"ran {record.tool} (tool call {next(calls)})")
        except redis.RedisError as error:  # progress is optional: the work goes on
            log.warning("task_progress_not_told", error=str(error))
    return report

