"""The coordinator's outbox: the calls of rooms that send in the same tick of the event
loop leave together, so that at load one task message carries the calls of several rooms
(docs/operations/capacity.md, "Shared messages").

A room alone waits for nothing: its calls are published on the loop's next iteration. While
a publish is on its way, the calls of the rooms sending meanwhile gather and go out as soon
as it returns, in as few messages as ``agents_per_task`` allows (the transport groups them,
``group_requests``).
"""

from __future__ import annotations

import asyncio

from parley.coordinator.transport import Transport
from parley.shared.models import CallRequest

Requests = list[tuple[str, CallRequest]]


class Outbox:
    """Gathers the rooms' call requests and publishes each gathering in one send."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.waiting: list[tuple[Requests, asyncio.Future[None]]] = []
        self.publishing: asyncio.Task[None] | None = None

    async def send(self, requests: Requests) -> None:
        """Send the requests with every other room's of this tick; return once published
        (or raise what the publish raised)."""
        sent = asyncio.get_running_loop().create_future()
        self.waiting.append((requests, sent))
        if self.publishing is None:
            # A task starts on the loop's next iteration: the rooms running in this one
            # join the same send.
            self.publishing = asyncio.create_task(self.publish(), name="outbox")
        await sent

    async def publish(self) -> None:
        """Publish what waits, again and again until nothing does."""
        try:
            while self.waiting:
                gathered, self.waiting = self.waiting, []
                try:
                    await self.publish_one(gathered)
                except asyncio.CancelledError:  # shutting down: no room waits for ever
                    for _, sent in gathered + self.waiting:
                        sent.cancel()
                    raise
        finally:
            self.publishing = None

    async def publish_one(self, gathered: list[tuple[Requests, asyncio.Future[None]]]) -> None:
        """One send of the gathered requests, in a thread (a publish waits for the broker's
        reply; meanwhile the event loop, every other room, moves on); each room learns how
        it went."""
        requests = [request for part, _ in gathered for request in part]
        try:
            await asyncio.to_thread(self.transport.send, requests)
        except Exception as error:  # every room of the send sees the failure as its own
            for _, sent in gathered:
                if not sent.done():
                    sent.set_exception(error)
        else:
            for _, sent in gathered:
                if not sent.done():  # a room cancelled meanwhile no longer waits
                    sent.set_result(None)

    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """A background task goes out alone and at once: one per task, seldom."""
        self.transport.send_background(queue, request, until, task_id)

    def revoke_background(self, task_id: str) -> None:
        """A cancelled task's revoke, alone and at once too."""
        self.transport.revoke_background(task_id)
