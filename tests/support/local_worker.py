"""An in-process twin of the Celery transport: answers bid requests at once, through the
workers' own bidding code, so the coordinator's logic runs in milliseconds."""

from __future__ import annotations

import redis

from parley.shared.keys import Keys
from parley.shared.models import CallRequest
from parley.shared.settings import get_settings
from parley.shared.store import RoomStore
from parley.workers.calls import answer_call, call_in
from parley.workers.tasks import chunk_writer


class LocalWorkerTransport:
    """Bids for every request as it is sent (optionally only for some agents). Scripted
    answers cost nothing; ``usage`` (Answer fields: prompt_tokens, completion_tokens,
    cost_usd) is what every answer reports instead, as a priced model's would."""

    def __init__(self, client: redis.Redis, keys: Keys, answering: set[str] | None = None,
                 usage: dict[str, float] | None = None, streams: bool = False):
        self.store = RoomStore(client, keys)
        self.answering = answering
        self.usage = usage or {}
        self.streams = streams  # write message_chunk events as a worker does
        self.sent: list[tuple[str, CallRequest]] = []
        self.settings = get_settings()  # the keys a real model's call may borrow

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Record each request and write the bids of the agents that answer."""
        self.sent.extend(requests)
        for _, request in requests:
            _, spec = self.store.read_spec(request.room)
            for name in request.agents:
                if self.answering is not None and name not in self.answering:
                    continue
                stream = chunk_writer(self.store, spec, request, name) if self.streams else None
                bid = answer_call(spec.agent(name), spec.agents, call_in(request, name),
                               lambda: [], request.deadline, stream, settings=self.settings)
                self.store.write_answer(request.room, bid.model_copy(update=self.usage), 1000)
