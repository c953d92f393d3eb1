"""A room's background tasks as its coordinator keeps them between turns: queued tasks sent
to their worker's queue, lapsed ones failed (a worker died) or timed out, and finished
ones posted as their agent's message once the turn under way has ended, or relayed in a
turn of their own (coordinator/relay.py) (seed 003's
"Talking and working: tasks"). Every write is a script: posting is fenced by the lease,
finishing happens once whoever comes first."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from redis.exceptions import ResponseError

from parley.coordinator.lease import Lease
from parley.coordinator.relay import RELAY_TURN, waiting_relay
from parley.coordinator.room_io import RoomIO, _fence
from parley.coordinator.transport import Sender
from parley.shared.models import RoomSpec
from parley.shared.tasks import (
    LAPSED_BEATS,
    Task,
    celery_task_id,
    finish_args,
    finish_keys,
    lapsed,
    posted_result,
    tasks_from_hash,
)

log = structlog.get_logger("parley.tasks")

LAPSED_ERROR = "its worker stopped answering (its heartbeat lapsed)"
NOT_TAKEN_ERROR = "no worker took it within its max_s"


class TaskKeeper:
    """One room's tasks, served under its lease."""

    def __init__(self, io: RoomIO, transport: Sender, prefix: str, heartbeat_s: float,
                 finished_max: int) -> None:
        self.io = io
        self.transport = transport
        self.prefix = prefix
        self.heartbeat_s = heartbeat_s
        self.finished_max = finished_max

    async def tasks(self, room: str) -> list[Task]:
        """The room's tasks, oldest first."""
        return tasks_from_hash(room, await self.io.redis.hgetall(self.io.keys.tasks(room)))

    async def serve(self, lease: Lease, spec: RoomSpec) -> tuple[bool, bool, Task | None]:
        """Send, sweep and hand back; returns (a message was posted, a task is still open,
        the task whose result waits for a relay turn). A room without tasks costs one
        read."""
        tasks = await self.tasks(lease.room)
        still_open = False
        for task in tasks:
            if task.status == "queued" and not task.sent and not task.cancel:
                await self.send(lease, spec, task)
            if task.cancel and task.sent and not task.revoked:
                await self.revoke(task)
            ended = lapsed(task, time.time(), self.heartbeat_s)
            if ended is not None:
                await self.finish(task, ended)
            # One swept now is looked at again soon too: its hand-back is read back then.
            still_open = still_open or task.is_open
        finished = [task for task in tasks if not task.is_open and not task.handed_back]
        if not finished:
            return False, still_open, None
        posted, relay = await self.hand_back(lease, finished)
        return posted, still_open, relay

    async def send(self, lease: Lease, spec: RoomSpec, task: Task) -> None:
        """Send the task to its worker's queue and mark it sent (sent twice after a takeover,
        its worker takes it once: task_claim.lua)."""
        queue = spec.agent(task.worker).call_queue  # an ACP agent's: its profile's queue
        payload = {"prefix": self.prefix, "room": task.room, "task": task.id}
        await asyncio.to_thread(self.transport.send_background, queue, payload, task.deadline,
                                celery_task_id(task))
        await self.io.redis.hset(self.io.keys.tasks(task.room), f"{task.id}:sent", 1)
        log.info("task_sent", room=task.room, task=task.id, worker=task.worker, queue=queue)

    async def revoke(self, task: Task) -> None:
        """Revoke a cancelled task's message, once: a worker holding it or given it later
        drops it unstarted (a worker started after the revoke does not hear of it, and its
        claim finds the cancel flag instead: task_claim.lua)."""
        await asyncio.to_thread(self.transport.revoke_background, celery_task_id(task))
        await self.io.redis.hset(self.io.keys.tasks(task.room), f"{task.id}:revoked", 1)
        log.info("task_revoked", room=task.room, task=task.id)

    async def finish(self, task: Task, status: str) -> None:
        """End a task its worker no longer speaks for."""
        if status == "timed_out":
            error = "ran past its max_s" if task.status == "running" else NOT_TAKEN_ERROR
        else:
            error = LAPSED_ERROR if status == "failed" else "cancelled"
        finished = await self.io.scripts.task_finish(
            keys=finish_keys(self.io.keys, task.room),
            args=finish_args(task, status, "", error, (0, 0, 0.0), self.io.events_maxlen,
                             self.finished_max))
        if finished:
            log.warning("task_swept", room=task.room, task=task.id, status=status)

    async def hand_back(self, lease: Lease, finished: list[Task]) -> tuple[bool, Task | None]:
        """Post the finished tasks' results waiting in the handbacks zset, oldest first (a
        task swept just now waits for the next look, read back with its result); returns
        whether one was posted, and the first to relay in a turn of its own (it stays in
        the zset until that turn commits)."""
        waiting = [raw.decode() if isinstance(raw, bytes) else raw for raw in
                   await self.io.redis.zrange(self.io.keys.handbacks(lease.room), 0, -1)]
        by_id = {task.id: task for task in finished}
        posted = False
        for task_id in waiting:
            task = by_id.get(task_id)
            if task is not None and task.relay_as != RELAY_TURN and await self.post(lease, task):
                posted = True
        return posted, waiting_relay(waiting, by_id)

    async def post(self, lease: Lease, task: Task) -> bool:
        """The task's result as its agent's message: True when posted now."""
        room = lease.room
        keys = [self.io.keys.lease(room), self.io.keys.state(room), self.io.keys.log(room),
                self.io.keys.tasks(room), self.io.keys.handbacks(room), self.io.keys.events(room)]
        args: list[Any] = [lease.token, task.id, posted_result(task), f"{time.time():.6f}",
                           self.io.limits.log_maxlen, self.io.events_maxlen]
        try:
            seq = await self.io.scripts.post_handback(keys=keys, args=args)
        except ResponseError as error:  # a fenced write: LEASELOST stops the room's work
            raise _fence(error) from error
        if seq:
            log.info("task_result_posted", room=room, task=task.id, seq=seq)
        return bool(seq)

    def next_look_ms(self) -> int:
        """When a room with open tasks is looked at again, going idle: soon enough to see a
        worker's heartbeat lapse."""
        return int((time.time() + LAPSED_BEATS * self.heartbeat_s) * 1000)
