"""An in-process twin of the Celery transport: answers bid requests at once, through the
workers' own bidding code, so the coordinator's logic runs in milliseconds."""

from __future__ import annotations

import redis

from parley.shared.keys import Keys
from parley.shared.models import AgentSpec, CallRequest, RoomSpec
from parley.shared.settings import get_settings
from parley.shared.store import RoomStore
from parley.workers.calls import call_in, uses_tools
from parley.workers.prompts import CALL_PROMPTS, NO_POLICY_TOOLS, PolicyTools
from parley.workers.tasks import chunk_writer, traced_call
from parley.workers.tools.journal import ToolJournal
from parley.workers.tools.loop import ToolRun
from parley.workers.tools.toolbox import build_toolbox


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

    def tools(self, spec: RoomSpec, request: CallRequest, agent: AgentSpec,
              policy_tools: PolicyTools = NO_POLICY_TOOLS) -> ToolRun | None:
        """What an agent's tool loop runs with: the tools PARLEY_WORKER_TOOLS offers and
        the room's journal, as on a worker (no approvals: such a call is denied)."""
        if not uses_tools(agent, request.kind, policy_tools):
            return None
        journal = ToolJournal(self.store, request.room, self.settings.tool_journal_maxlen,
                              request.turn, request.phase)
        return ToolRun(build_toolbox(self.settings), journal, names=list(spec.agent_names),
                       max_result_bytes=self.settings.tool_result_max_bytes)

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Record each request and write the bids of the agents that answer."""
        self.sent.extend(requests)
        for _, request in requests:
            _, spec = self.store.read_spec(request.room)
            for name in request.agents:
                if self.answering is not None and name not in self.answering:
                    continue
                stream = chunk_writer(self.store, spec, request, name) if self.streams else None
                agent = spec.agent(name)
                offers = CALL_PROMPTS[request.kind].policy_tools(spec, agent)
                # Through the task's own traced call: its spans nest under the publish.
                bid = traced_call(request, agent, spec.agents, call_in(request, name),
                               lambda: [], request.deadline, stream, settings=self.settings,
                               tools=self.tools(spec, request, agent, offers),
                               policy_tools=offers)
                self.store.write_answer(request.room, bid.model_copy(update=self.usage), 1000)
