"""How call requests reach workers: Celery in production, a list in memory for tests, and
a room's guard that sends only while its lease holds.

The coordinator sends tasks by name and never imports the workers' code. One task message
carries up to ``agents_per_task`` calls of one queue, of one room or of several
(``group_requests``; the rooms' requests meet in the coordinator's outbox, outbox.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

from celery import Celery
from kombu.entity import PERSISTENT_DELIVERY_MODE
from kombu.utils.uuid import uuid

from parley.coordinator.lease import Lease
from parley.shared import metrics
from parley.shared.connections import broker_use_ssl
from parley.shared.models import CallRequest
from parley.shared.protocol import BACKGROUND_TASK, CALL_TASK
from parley.shared.settings import Settings


class Transport(Protocol):
    """Sends call requests, each to its agents' queue."""

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Send each (queue, request)."""

    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """Send a background task (BACKGROUND_TASK) to its worker's queue, as Celery task
        ``task_id``."""

    def revoke_background(self, task_id: str) -> None:
        """Revoke the background task sent as ``task_id``: no worker starts it."""


class Sender(Protocol):
    """What a room's turn loop sends its calls through, without blocking the event loop."""

    async def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Send each (queue, request); return once they are published."""

    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """Send one background task (blocking: callers run it in a thread)."""

    def revoke_background(self, task_id: str) -> None:
        """Revoke one background task (blocking: callers run it in a thread)."""


class CeleryTransport:
    """Publishes call requests as Celery tasks on the broker."""

    def __init__(self, broker_url: str, timeout_s: float = 2.0, *, settings: Settings) -> None:
        self.agents_per_task = settings.agents_per_task
        self.app = Celery("parley-coordinator", broker=broker_url)
        self.app.conf.update(
            # The same verified TLS as every other Redis client (shared/connections.py).
            broker_use_ssl=broker_use_ssl(settings, broker_url),
            broker_connection_retry_on_startup=True,
            task_ignore_result=True,
            # A broker that stops answering must not hold a room's publish forever: the
            # room's lease would keep being renewed while its turn never moves.
            broker_connection_timeout=timeout_s,
            broker_transport_options={"socket_timeout": timeout_s,
                                      "socket_connect_timeout": timeout_s},
        )

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Publish the requests as task messages of up to ``agents_per_task`` calls per
        queue (``group_requests``); each message expires at its latest call's deadline,
        and the worker drops each call past its own, so a late or redelivered call is not
        paid for.

        A plain Celery task message, built and published directly: ``send_task``'s option
        handling, routing and signals cost as much CPU as the publish itself. No result is
        kept (``ignore_result``); publishes retry by Celery's policy.
        """
        amqp = self.app.amqp
        retry_policy = self.app.conf.task_publish_retry_policy
        with self.app.producer_or_acquire() as producer:
            for queue, message in group_requests(requests, self.agents_per_task):
                deadline = max(request.deadline for request in message)
                headers, properties, body, _ = amqp.create_task_message(
                    uuid(), CALL_TASK, (), {"requests": [r.model_dump() for r in message]},
                    expires=datetime.fromtimestamp(deadline, tz=UTC), ignore_result=True,
                    argsrepr="()", kwargsrepr="; ".join(map(describe, message)))
                producer.publish(
                    body, exchange="", routing_key=queue, declare=[amqp.queues[queue]],
                    serializer="json", delivery_mode=PERSISTENT_DELIVERY_MODE,
                    expiration=max(0.0, deadline - time.time()), headers=headers,
                    retry=True, retry_policy=retry_policy, **properties)
                metrics.observe_message(message)


    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """Publish a background task; it expires when the task's max_s passes."""
        self.app.send_task(BACKGROUND_TASK, args=[request], queue=queue, task_id=task_id,
                           expires=datetime.fromtimestamp(until, tz=UTC), ignore_result=True)

    def revoke_background(self, task_id: str) -> None:
        """Broadcast the revoke to the live workers (no reply awaited): one holding the
        message, or given it later, drops it unstarted."""
        self.app.control.revoke(task_id)


class InMemoryTransport:
    """Keeps what was sent, for tests that play the worker themselves."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, CallRequest]] = []
        self.background: list[tuple[str, dict[str, str]]] = []
        self.revoked: list[str] = []

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Record the requests."""
        self.sent.extend(requests)

    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """Record the background task."""
        self.background.append((queue, request))

    def revoke_background(self, task_id: str) -> None:
        """Record the revoke."""
        self.revoked.append(task_id)


class HeldTransport:
    """A room's view of the outbox: sends only while the room's lease is surely held.

    A coordinator that stalled past its renewals must not pay for bids that the room's
    next holder asks for again; and a send that stalled past the lease ends the room's work
    there rather than at its next fenced write.
    """

    def __init__(self, sender: Sender, lease: Lease) -> None:
        self.sender = sender
        self.lease = lease
        # A send needs the lease only while it publishes: a third of the lease's margin
        # (half a renewal period). So a coordinator back from a pause that its keeper
        # covered (a full collection stops every thread) goes on at once, its leases short
        # by the pause until the keeper's next confirmation, due a moment later.
        self.margin_s = lease.margin_s / 3

    async def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Send the requests if the lease holds; raise LeaseLost otherwise."""
        self.lease.ensure_held(self.margin_s)
        await self.sender.send(requests)
        self.lease.ensure_held(self.margin_s)

    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """Send the background task if the lease holds; raise LeaseLost otherwise."""
        self.lease.ensure_held(self.margin_s)
        self.sender.send_background(queue, request, until, task_id)

    def revoke_background(self, task_id: str) -> None:
        """Revoke the background task: harmless whoever holds the lease."""
        self.sender.revoke_background(task_id)


def describe(request: CallRequest) -> str:
    """A short summary of a request, for Celery's monitoring tools."""
    return (f"{{room: {request.room}, turn: {request.turn}, {request.kind.value}: "
            f"{', '.join(request.agents)}}}")


def chunk_requests(agents_by_queue: dict[str, list[str]], agents_per_task: int,
                   template: CallRequest, numbers: dict[str, int]) -> list[tuple[str, CallRequest]]:
    """Split a phase's calls into one request per queue and chunk of ``agents_per_task``,
    each agent with its call number."""
    requests = []
    for queue, agents in agents_by_queue.items():
        for start in range(0, len(agents), agents_per_task):
            chunk = agents[start:start + agents_per_task]
            calls = {name: numbers[name] for name in chunk}
            requests.append((queue, template.model_copy(update={"agents": chunk, "calls": calls})))
    return requests


def group_requests(requests: list[tuple[str, CallRequest]], agents_per_task: int
                   ) -> list[tuple[str, list[CallRequest]]]:
    """The task messages the requests go out as: per queue, in the order sent, as few as
    hold at most ``agents_per_task`` calls each (a request bigger than that, which
    ``chunk_requests`` never makes, goes alone)."""
    messages: list[tuple[str, list[CallRequest]]] = []
    open_message: dict[str, tuple[list[CallRequest], int]] = {}
    for queue, request in requests:
        message, calls = open_message.get(queue, ([], 0))
        if message and calls + len(request.agents) > agents_per_task:
            message, calls = [], 0
        if not message:
            messages.append((queue, message))
        message.append(request)
        open_message[queue] = (message, calls + len(request.agents))
    return messages
