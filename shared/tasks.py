"""Background tasks (seed 003, "Talking and working: tasks"): long work off the floor.

A task is recorded in its room (``Keys.tasks``, flat fields ``<id>:<field>``) and moves
``queued`` (started by a host, a person or the agent's ``work_in_background`` tool) ->
``running`` (its worker took it) -> ``done``, ``failed``, ``cancelled`` or ``timed_out``.
Each step is one Lua script; finishing (task_finish.lua) happens exactly once and queues
the hand-back in the same write, whoever finishes (the worker, the coordinator's sweep of
lapsed heartbeats, a cancel of a queued task).

A task works in a room of its own, ``<room>.task-<short id>``, created when its worker
takes it: a real room, linked to its parent both ways, listed with it and deleted and
archived with it. It runs no turns: its conversation is the messages its task was handed,
the instruction and the worker's answer, and its totals are the task's.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Literal

import redis
from pydantic import BaseModel

from parley.shared.keys import Keys
from parley.shared.models import MentionPolicy, RoomSpec
from parley.shared.records import decode
from parley.shared.refusals import Refusal, refusal_of
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore

TaskStatus = Literal["queued", "running", "done", "failed", "cancelled", "timed_out"]
OPEN_STATUSES = ("queued", "running")
FLOOR_OPS_MAXLEN = 1000  # as an operator's floor changes (store.FLOOR_OPS_MAXLEN)
SHORT_ID = 6  # the hex digits of a task's id that name it
HISTORY_MESSAGES = 12  # what a task is handed of its parent room's conversation
LAPSED_BEATS = 3  # heartbeats missed before a running task counts as its worker's death
NOTES_TASKS = 8  # the newest tasks a turn's notes list


class TaskNotFound(LookupError):
    """No task of the room has that id (or the prefix names none, or several)."""


class TaskRefused(ValueError):
    """A task cannot be started as asked (unknown agent, no background set up)."""


class Task(BaseModel):
    """One background task as its room records it."""

    id: str
    room: str
    agent: str
    worker: str
    hand_back: Literal["relay", "post"]
    instruction: str
    by: str = ""
    status: TaskStatus
    number: int = 1
    started_at: float = 0.0
    beat_at: float = 0.0
    deadline: float = 0.0
    finished_at: float | None = None
    result: str = ""
    error: str = ""
    progress: str = ""
    cancel: bool = False
    revoked: bool = False
    sent: bool = False
    handed_back: bool = False
    relay_as: Literal["instruct", "turn", "post"] = "post"  # how its result comes back
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def short_id(self) -> str:
        """The digits that name the task in notes and commands."""
        return self.id[:SHORT_ID]

    @property
    def is_open(self) -> bool:
        """True while the task may still run."""
        return self.status in OPEN_STATUSES

    @property
    def room_id(self) -> str:
        """The task's own room: its parent's id, then ``.task-`` and its short id."""
        return f"{self.room}.task-{self.short_id}"


def task_room_spec(spec: RoomSpec, task: Task) -> RoomSpec:
    """The spec of a task's room: its parent's, under a name of its own, with no agent set
    up for background work (a task starts no task). The worker agent is in it, its tools,
    model and profile as they are."""
    agents = [agent.model_copy(update={"background": None}) for agent in spec.agents]
    return spec.model_copy(update={"name": f"{spec.name} (task {task.short_id})",
                                   "agents": agents})


def new_task_id() -> str:
    """A fresh task id: 16 hex digits."""
    return secrets.token_hex(8)


def task_from_fields(room: str, task_id: str, fields: dict[str, str]) -> Task:
    """A task from its flat fields (``<field>`` without the id)."""
    def flag(name: str) -> bool:
        return fields.get(name) == "1"

    return Task.model_validate(dict(
        id=task_id, room=room, agent=fields.get("agent", ""), worker=fields.get("worker", ""),
        hand_back=fields.get("hand_back") or "relay", instruction=fields.get("instruction", ""),
        by=fields.get("by", ""), status=fields.get("status") or "queued",
        number=int(fields.get("number") or 1),
        started_at=float(fields.get("started_at") or 0),
        beat_at=float(fields.get("beat_at") or 0), deadline=float(fields.get("deadline") or 0),
        finished_at=float(fields["finished_at"]) if fields.get("finished_at") else None,
        result=fields.get("result", ""), error=fields.get("error", ""),
        progress=fields.get("progress", ""), cancel=flag("cancel"), revoked=flag("revoked"),
        sent=flag("sent"), handed_back=flag("handed_back"),
        relay_as=fields.get("relay_as") or "post",
        prompt_tokens=int(fields.get("prompt_tokens") or 0),
        completion_tokens=int(fields.get("completion_tokens") or 0),
        cost_usd=float(fields.get("cost_usd") or 0)))


def tasks_from_hash(room: str, raw: dict[Any, Any]) -> list[Task]:
    """Every task of a room's tasks hash, oldest first."""
    by_id: dict[str, dict[str, str]] = {}
    for key, value in raw.items():
        task_id, _, name = decode(key).partition(":")
        if task_id != "worker":
            by_id.setdefault(task_id, {})[name] = decode(value)
    tasks = [task_from_fields(room, task_id, fields) for task_id, fields in by_id.items()]
    return sorted(tasks, key=lambda task: task.started_at)


def celery_task_id(task: Task) -> str:
    """The Celery task id a task is sent under, so that a cancel can revoke it by name."""
    return f"parley-task-{task.room}-{task.id}"


def relay_instruction(task: Task, status: str, result: str, error: str) -> str:
    """What a relayed task's agent is told: the result to say in its own words, or what
    became of the task."""
    if status == "done":
        return (f"Your background task {task.short_id} ({one_line(task.instruction)}) is done. "
                f"Its result, to tell the room in your own words:\n{result}")
    if status == "cancelled":
        return (f"Your background task {task.short_id} ({one_line(task.instruction)}) was "
                "cancelled: say so.")
    return (f"Your background task {task.short_id} ({one_line(task.instruction)}) "
            f"{status.replace('_', ' ')}: {error}. Say so.")


def posted_result(task: Task) -> str:
    """What a posted task's agent's message says: the result as it is, or a short note."""
    if task.status == "done" and task.result:
        return task.result
    if task.status == "cancelled":
        return f"(task {task.short_id} was cancelled)"
    return f"(task {task.short_id} {task.status.replace('_', ' ')}: {task.error or 'no result'})"


def on_it(instruction: str) -> str:
    """What an agent that started a task without a word says of it."""
    return f"I'm on it, in the background: {one_line(instruction)}"


def one_line(text: str, most: int = 80) -> str:
    """The start of ``text`` on one line."""
    line = " ".join(text.split())
    return line if len(line) <= most else line[:most - 1] + "…"


def notes_line(task: Task) -> str:
    """A task as a turn's notes list it."""
    state = task.status.replace("_", " ")
    if task.progress and task.status == "running":
        state += f" ({one_line(task.progress, 60)})"
    return (f"- task {task.short_id} of {task.agent} (by {task.worker}): "
            f"{one_line(task.instruction)} [{state}]")


class TaskBook:
    """A room's background tasks in one Redis under one key prefix (sync)."""

    def __init__(self, client: redis.Redis, keys: Keys, events_maxlen: int,
                 finished_max: int) -> None:
        self.redis: Any = client
        self.keys = keys
        self.scripts = Scripts(client)
        self.events_maxlen = events_maxlen
        self.finished_max = finished_max

    def start(self, room: str, spec: RoomSpec, agent: str, instruction: str,
              hand_back: str | None = None, by: str = "", task_id: str | None = None) -> Task:
        """Record a queued task for ``agent`` (its coordinator sends it on) and make the room
        due; TaskRefused names what is wrong."""
        if agent not in spec.agent_names:
            raise TaskRefused(f"{agent!r} is not an agent of room {room} "
                              f"({', '.join(spec.agent_names)})")
        if not instruction.strip():
            raise TaskRefused("a task needs something to do: the instruction is empty")
        if hand_back not in (None, "relay", "post"):
            raise TaskRefused(f"hand_back must be relay or post, not {hand_back!r}")
        background = spec.agent(agent).background
        worker = (background.worker if background else None) or agent
        hand_back = hand_back or (background.hand_back if background else "relay")
        max_s = background.max_s if background else 3600.0
        task_id = task_id or new_task_id()
        try:
            self._start(room, task_id, agent, worker, hand_back, instruction, by, max_s,
                        relay_as(spec, hand_back))
        except redis.ResponseError as error:
            refused = refusal_of(error)
            if refused is not None and refused.code is Refusal.TASK_ROOM:
                raise TaskRefused(f"room {room} is a background task's own room (of room "
                                  f"{refused.detail}): a task starts no task of its own"
                                  ) from None
            raise
        self.redis.zadd(self.keys.runnable, {room: int(time.time() * 1000)}, lt=True)
        return self.get(room, task_id)

    def _start(self, room: str, task_id: str, agent: str, worker: str, hand_back: str,
               instruction: str, by: str, max_s: float, relay: str) -> None:
        self.scripts.task_start(
            keys=[self.keys.spec(room), self.keys.state(room), self.keys.tasks(room),
                  self.keys.task_ids(room), self.keys.events(room)],
            args=[task_id, agent, worker, hand_back, instruction, by, f"{time.time():.6f}",
                  max_s, self.events_maxlen, relay])

    def open_room(self, task: Task, spec: RoomSpec, organization: str,
                  handed: list[tuple[str, str]]) -> None:
        """Create the task's room (once: a task delivered again makes none) holding the
        messages it was handed and its instruction."""
        store = RoomStore(self.redis, self.keys)
        store.create_task_room(task.room_id, task_room_spec(spec, task), task.room, task.id,
                               organization)
        store.write_task_log(task.room_id, 0, task.worker,
                             [*handed, (task.by or task.agent, task.instruction)])

    def close_room(self, task: Task, answer: str, usage: tuple[int, int, float]) -> None:
        """Write the worker's answer (when it gave one) and what the task cost into the
        task's room."""
        store = RoomStore(self.redis, self.keys)
        seq = store.read_state(task.room_id).last_seq
        store.write_task_log(task.room_id, seq, task.worker,
                             [(task.worker, answer)] if answer else [], usage)

    def list(self, room: str) -> list[Task]:
        """The room's tasks, oldest first."""
        return tasks_from_hash(room, self.redis.hgetall(self.keys.tasks(room)))

    def get(self, room: str, task_id: str) -> Task:
        """The task whose id is or starts with ``task_id``; TaskNotFound otherwise."""
        found = [task for task in self.list(room) if task.id.startswith(task_id.lower())]
        if len(found) != 1 or not task_id:
            many = f" ({len(found)} tasks start so)" if found else ""
            raise TaskNotFound(f"no task {task_id!r} in room {room}{many}")
        return found[0]

    def cancel(self, room: str, task_id: str) -> Task:
        """Ask the task to stop: its worker's loop sees the flag at its next heartbeat; a
        task no worker took yet ends cancelled at once."""
        task = self.get(room, task_id)
        if not task.is_open:
            return task
        self.redis.hset(self.keys.tasks(room), f"{task.id}:cancel", 1)
        if task.status == "queued":
            self.finish(room, task, "cancelled")
        return self.get(room, task.id)

    def finish(self, room: str, task: Task, status: str, result: str = "", error: str = "",
               usage: tuple[int, int, float] = (0, 0, 0.0)) -> bool:
        """Finish the task (exactly once: False when it had finished before) and make the
        room due for its hand-back."""
        finished = self.scripts.task_finish(
            keys=finish_keys(self.keys, room),
            args=finish_args(task, status, result, error, usage, self.events_maxlen,
                             self.finished_max))
        self.redis.zadd(self.keys.runnable, {room: int(time.time() * 1000)}, lt=True)
        return bool(finished)

    def claim(self, room: str, task_id: str) -> bool:
        """Take the queued task for this worker; False when it is not there to take."""
        return bool(self.scripts.task_claim(keys=[self.keys.tasks(room)],
                                            args=[task_id, f"{time.time():.6f}"]))

    def beat(self, room: str, task_id: str, progress: str = "") -> tuple[bool, bool]:
        """The task's heartbeat: (it still runs, it was asked to cancel)."""
        running, cancel = self.scripts.task_beat(
            keys=[self.keys.tasks(room), self.keys.events(room)],
            args=[task_id, f"{time.time():.6f}", progress, self.events_maxlen])
        return bool(running), bool(cancel)


def relay_as(spec: RoomSpec, hand_back: str) -> str:
    """How a task's result comes back: ``instruct`` (a relay in a discussion room, whose
    speak queue takes instructions), ``turn`` (a relay in a room of another policy: the
    coordinator gives the agent a turn of its own at the next turn boundary, the policy
    not asked), else ``post``."""
    if hand_back != "relay":
        return "post"
    return "instruct" if isinstance(spec.policy, MentionPolicy) else "turn"


def finish_keys(keys: Keys, room: str) -> list[str]:
    """task_finish.lua's keys."""
    return [keys.spec(room), keys.state(room), keys.tasks(room), keys.handbacks(room),
            keys.floor_ops(room), keys.events(room), keys.tasks_done(room), keys.task_ids(room)]


def finish_args(task: Task, status: str, result: str, error: str,
                usage: tuple[int, int, float], events_maxlen: int, finished_max: int
                ) -> list[Any]:
    """task_finish.lua's arguments."""
    prompt, completion, cost = usage
    return [task.id, status, result, error, f"{time.time():.6f}", int(prompt),
            int(completion), repr(float(cost)), relay_instruction(task, status, result, error),
            events_maxlen, FLOOR_OPS_MAXLEN, finished_max]


def lapsed(task: Task, now: float, heartbeat_s: float) -> str | None:
    """How a task the coordinator sweeps has ended without its worker saying so, if it has:
    past its max_s, ``timed_out`` (a queued one too: its message expired with it, so no
    worker will ever take it); cancelled or heartbeat lapsed, ``cancelled`` or ``failed``."""
    if task.status == "queued":
        return "timed_out" if now > task.deadline else None
    if task.status != "running":
        return None
    if now > task.deadline:
        return "timed_out"
    if now - task.beat_at > LAPSED_BEATS * heartbeat_s:
        return "cancelled" if task.cancel else "failed"
    return None
