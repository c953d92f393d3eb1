"""The tool loop of a call whose answer is posted: the model is offered the agent's tools,
the tool calls it asks for run (side by side), their results go back to it, round after
round up to ``max_tool_rounds``, all inside the call's deadline; then it is asked for its
text with tools off, and that text is the message.

================================  ======================================================
case                              what the model is told (status)
================================  ======================================================
the tool returned                 its result, capped, cut and quoted (``ok``)
it raised, or is not offered      the error (``error``); the call goes on
it outlasted timeout_s/deadline   that it timed out (``timeout``)
a person denied it, or no gate    the denial and its reason (``denied``)
recorded in the journal           the recorded result (``replayed``: not run again)
started on a worker that stopped  ``uncertain``, unless the tool is idempotent: run again
================================  ======================================================

A tool that needs approval (its ``approval`` option, or the agent's ``approve`` list) runs
only once the gate says yes, and its start is claimed in the journal only then (a call
asked again meanwhile waits for the same answer); the time the gate took is added to the
call's deadline, which the coordinator holds meanwhile.

The call's kind may offer the policy's own tools beside the agent's (``PolicyTools``, a
handoff's ``transfer_to_<agent>``): a step that calls one is not run on; the call ends
with it on its answer, and the policy decides.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from parley.shared import metrics, tracing
from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    AgentSpec,
    JsonValue,
    PolicyCall,
    ToolCallRecord,
    ToolCallStatus,
)
from parley.shared.records import cap_bytes
from parley.workers.prompts import (
    NO_POLICY_TOOLS,
    ChatMessage,
    PolicyTools,
    tool_result_content,
)
from parley.workers.tools.approvals import ApprovalVerdict
from parley.workers.tools.base import ToolDef, ToolError
from parley.workers.tools.journal import AskedCall, Claim, Done, Step, ToolJournal
from parley.workers.tools.toolbox import ALL_OF, Toolbox

# A record's result excerpt (the turn record, the dashboard).
EXCERPT_BYTES = 2048
# What OpenAI accepts as a function's name; a tool's name becomes one (``/`` -> ``__``).
_NOT_IN_FUNCTION = re.compile(r"[^A-Za-z0-9_-]")
NO_GATE = "denied: approvals are not available on this worker"
UNCERTAIN = "the worker running this tool stopped before it returned"
_tool_calls = ThreadPoolExecutor(max_workers=512, thread_name_prefix="tool-call")


# Waits for a person's answer to the tool call (the approvals' gate).
Gate = Callable[[ToolCallRecord], ApprovalVerdict]
# Runs a ``queue=`` tool on its queue: (tool, record, our claim, timeout_s, until).
Remote = Callable[[ToolDef, ToolCallRecord, Claim, float, float], None]
# One model step: (round, the tool conversation so far, the tools offered, whether it is
# the last, text-only step, the deadline) -> (the provider's raw response, its usage).
ModelStep = Callable[[int, list[ChatMessage], list[dict[str, Any]], bool, float],
                     tuple[Any, dict[str, Any]]]


@dataclass
class ToolRun:
    """What a call's tool loop runs with: the worker's toolbox, the room's journal (None:
    nothing recorded), the approvals' gate, the way to a tool's queue, the names that the
    results must not speak under, and their cap."""

    toolbox: Toolbox
    journal: ToolJournal | None = None
    gate: Gate | None = None
    remote: Remote | None = None
    names: list[str] = field(default_factory=list)
    max_result_bytes: int = 16_384
    organization: str = DEFAULT_ORGANIZATION  # the room's, for the tool metrics' label
    # Told of each tool call that ended (a background task reports its progress so).
    on_ended: Callable[[ToolCallRecord], None] | None = None


@dataclass
class LoopResult:
    """The loop's last model response, every step's usage summed, its tool calls, and the
    policy's tool it ended with (if any)."""

    raw: Any
    usage: dict[str, Any]
    records: list[ToolCallRecord]
    policy_call: PolicyCall | None = None


def function_name(tool: str) -> str:
    """The function name a tool is offered under (``grafana/query`` -> ``grafana__query``)."""
    return _NOT_IN_FUNCTION.sub("_", tool.replace("/", "__"))[:64]


def offered(tools: list[ToolDef]) -> list[dict[str, Any]]:
    """The tools in OpenAI's tools format."""
    return [{"type": "function", "function": {"name": function_name(tool.name),
                                              "description": tool.description,
                                              "parameters": tool.parameters}}
            for tool in tools]


def needs_approval(tool: ToolDef, agent: AgentSpec) -> bool:
    """True when a person approves each call of ``tool`` by ``agent`` first."""
    return tool.options.approval or any(
        name == tool.name or (name.endswith(ALL_OF) and tool.name.startswith(name[:-1]))
        for name in agent.approve)


def add_usage(total: dict[str, Any], usage: dict[str, Any]) -> None:
    """Add one step's usage to the loop's (the dropped messages are the last step's)."""
    for name, value in usage.items():
        if name == "dropped_messages":
            total[name] = value
        else:
            total[name] = total.get(name, 0) + value


def read_step(raw: Any) -> Step:
    """The text and tool calls of a provider's response."""
    message = raw["choices"][0]["message"] if isinstance(raw, dict) else raw.choices[0].message
    get = message.get if isinstance(message, dict) else lambda name: getattr(message, name, None)
    calls = []
    for index, call in enumerate(get("tool_calls") or []):
        function = call["function"] if isinstance(call, dict) else call.function
        name = function["name"] if isinstance(function, dict) else function.name
        arguments = function["arguments"] if isinstance(function, dict) else function.arguments
        call_id = call["id"] if isinstance(call, dict) else call.id
        calls.append(AskedCall(str(call_id or f"call_{index}"), str(name or ""),
                               str(arguments or "{}")))
    return Step(str(get("content") or ""), tuple(calls))


def assistant_turn(step: Step) -> ChatMessage:
    """The model's step as the assistant message the next step reads."""
    return {"role": "assistant", "content": step.content or None,
            "tool_calls": [{"id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments}}
                           for call in step.calls]}


class ToolLoop:
    """One call's tool loop: ``call_key`` (``<turn>.<phase>.<call>``) names its journal
    records, ``tools`` are the agent's, resolved."""

    def __init__(self, agent: AgentSpec, tools: list[ToolDef], call_key: str, run: ToolRun,
                 deadline: float, policy_tools: PolicyTools = NO_POLICY_TOOLS) -> None:
        self.agent = agent
        self.policy_tools = policy_tools
        self.tools = {function_name(tool.name): tool for tool in tools}
        self.call_key = call_key
        self.run = run
        self.deadline = deadline
        # Every tool call so far, kept here so that a call failing midway still tells them.
        self.records: list[ToolCallRecord] = []

    def loop(self, step: ModelStep) -> LoopResult:
        """Step the model through its tool calls; its last response is the answer."""
        conversation: list[ChatMessage] = []
        records = self.records
        usage: dict[str, Any] = {}
        offer = [*offered(list(self.tools.values())), *self.policy_tools.offered]
        for round_ in range(self.agent.max_tool_rounds):
            field_ = f"{self.call_key}.{round_}"
            asked = self.run.journal.recorded_step(field_) if self.run.journal else None
            if asked is None:
                raw, used = step(round_, conversation, offer, False, self.deadline)
                add_usage(usage, used)
                asked = read_step(raw)
                ending = next((call for call in asked.calls
                               if self.policy_tools.ends_call(call.name)), None)
                if ending is not None:  # the policy's: none of the step's calls runs
                    arguments, _problem = parse_arguments(ending.arguments)
                    return LoopResult(raw, usage, records, PolicyCall(name=ending.name,
                                                                      arguments=arguments))
                if not asked.calls:
                    return LoopResult(raw, usage, records)
                if self.run.journal:
                    asked = self.run.journal.record_step(field_, asked)
            conversation.append(assistant_turn(asked))
            done = self.run_calls(round_, asked.calls)
            records += [record for record, _ in done]
            conversation += [{"role": "tool", "tool_call_id": call.id,
                              "content": tool_result_content(record.status, text,
                                                             self.run.names)}
                             for call, (record, text) in zip(asked.calls, done, strict=True)]
        raw, used = step(self.agent.max_tool_rounds, conversation, offer, True, self.deadline)
        add_usage(usage, used)
        return LoopResult(raw, usage, records)

    def run_calls(self, round_: int, calls: tuple[AskedCall, ...]
                  ) -> list[tuple[ToolCallRecord, str]]:
        """The round's tool calls, side by side; each one's record and result text."""
        futures = [_tool_calls.submit(contextvars.copy_context().run, self.run_call,
                                      round_, index, call)
                   for index, call in enumerate(calls)]
        results = [future.result() for future in futures]
        # A gate's wait held the call's deadline: the loop's moves with it.
        self.deadline += max((held for _, _, held in results), default=0.0)
        return [(record, text) for record, text, _ in results]

    def run_call(self, round_: int, index: int, call: AskedCall
                 ) -> tuple[ToolCallRecord, str, float]:
        """One tool call, in its ``execute_tool <name>`` span."""
        attributes = None
        if tracing.on():  # off, the attributes would be built for nothing
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                          "gen_ai.tool.call.id": f"{self.call_key}.{round_}.{index}",
                          "gen_ai.agent.name": self.agent.name}
            if tracing.records_content():
                attributes["gen_ai.tool.call.arguments"] = call.arguments
        with tracing.span(f"execute_tool {call.name}", attributes) as current:
            record, text, held = self.journaled_call(round_, index, call)
            if current is not None:
                tracing.annotate(current, {"parley.tool.status": record.status.value,
                                           "parley.tool.replayed": record.replayed})
            return record, text, held

    def journaled_call(self, round_: int, index: int, call: AskedCall
                       ) -> tuple[ToolCallRecord, str, float]:
        """One tool call through the journal: replayed, waited for, or run; with the time
        an approval held the deadline."""
        tool = self.tools.get(call.name)
        record = ToolCallRecord(id=f"{self.call_key}.{round_}.{index}", agent=self.agent.name,
                                tool=tool.name if tool else call.name, round=round_,
                                index=index)
        arguments, problem = parse_arguments(call.arguments)
        record = record.model_copy(update={"arguments": arguments})
        if tool is None:
            problem = f"{call.name} is not one of this agent's tools"
        journal = self.run.journal
        recorded = journal.read(record.id) if journal else None
        if isinstance(recorded, Done):
            return recorded.record.model_copy(update={"replayed": True}), recorded.text, 0.0
        # The person answers before the call is claimed: a call asked again meanwhile (a
        # takeover) waits for the same approval, not for a claim that would go stale once
        # the wait outlasts the tool's timeout and read as a worker that stopped.
        held = 0.0
        denial = ""
        if tool is not None and not problem and needs_approval(tool, self.agent):
            approved, record, held = self.approve(record)
            denial = "" if approved else record.result or NO_GATE
        if journal is None:
            return (*self.execute(tool, record, problem, denial, None, held), held)
        timeout_s = tool.options.timeout_s if tool else 0.0
        claim, found = journal.claim(record, timeout_s)
        while claim is None:
            if found is None:  # the room is gone: nothing is recorded, nothing runs
                return (self.ended(record, ToolCallStatus.ERROR, "the room is gone", 0.0), "",
                        held)
            if isinstance(found, Done):
                return found.record.model_copy(update={"replayed": True}), found.text, held
            if found.expires > time.time():
                # Another worker's call of it is still within its timeout: wait for it.
                waited = journal.wait(record.id, min(found.expires, self.deadline + held))
                if isinstance(waited, Done):
                    return (waited.record.model_copy(update={"replayed": True}), waited.text,
                            held)
                if time.time() >= self.deadline + held:
                    return (self.ended(record, ToolCallStatus.TIMEOUT,
                                       "the call's deadline came first", 0.0), "", held)
                found = waited
                continue
            if tool is None or not tool.options.idempotent:
                return (*self.finish(journal, record, ToolCallStatus.UNCERTAIN, UNCERTAIN,
                                     0.0, found), held)
            claim, found = journal.claim(record, timeout_s, replacing=found.raw)
        return (*self.execute(tool, record, problem, denial, claim, held), held)

    def execute(self, tool: ToolDef | None, record: ToolCallRecord, problem: str,
                denial: str, claim: Claim | None, held: float) -> tuple[ToolCallRecord, str]:
        """Run a claimed (and, if it needs it, approved) tool call, its deadline held by
        ``held`` seconds of approval; record its result."""
        journal = self.run.journal
        if tool is None or problem:
            return self.finish(journal, record, ToolCallStatus.ERROR, problem, 0.0, claim)
        if denial:
            return self.finish(journal, record, ToolCallStatus.DENIED, denial, 0.0, claim)
        started = time.perf_counter()
        status, text = self.invoke(tool, record, claim, self.deadline + held)
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        return self.finish(journal, record, status, text, duration_ms, claim)

    def approve(self, record: ToolCallRecord) -> tuple[bool, ToolCallRecord, float]:
        """Ask the gate; whether it approved, the record with who answered (or why it was
        denied), and how long the wait took."""
        if self.run.gate is None:
            return False, record.model_copy(update={"result": NO_GATE}), 0.0
        asked = time.time()
        verdict = self.run.gate(record)
        held = time.time() - asked
        if verdict.approved:
            return True, record.model_copy(update={"approved_by": verdict.by}), held
        return False, record.model_copy(update={"result": verdict.denial(),
                                                "approved_by": verdict.by}), held

    def invoke(self, tool: ToolDef, record: ToolCallRecord, claim: Claim | None,
               deadline: float) -> tuple[ToolCallStatus, str]:
        """The tool's status and result text, bounded by its timeout and ``deadline``."""
        left = deadline - time.time()
        timeout_s = min(tool.options.timeout_s, left)
        if timeout_s <= 0:
            return ToolCallStatus.TIMEOUT, "no time was left before the call's deadline"
        if tool.options.queue and self.run.remote and claim and self.run.journal:
            return self.invoke_remote(tool, record, claim, timeout_s)
        return call_tool(self.run.toolbox, tool.name, record.arguments, timeout_s,
                         self.run.max_result_bytes)

    def invoke_remote(self, tool: ToolDef, record: ToolCallRecord, claim: Claim,
                      timeout_s: float) -> tuple[ToolCallStatus, str]:
        """Send the tool call to its queue and wait for its result in the journal."""
        assert self.run.remote is not None and self.run.journal is not None
        until = time.time() + timeout_s
        self.run.remote(tool, record, claim, timeout_s, until)
        done = self.run.journal.wait(record.id, until)
        if isinstance(done, Done):
            return done.record.status, done.text
        return ToolCallStatus.TIMEOUT, f"{tool.name} outlasted its {timeout_s:g}s on " \
                                       f"queue {tool.options.queue}"

    def finish(self, journal: ToolJournal | None, record: ToolCallRecord,
               status: ToolCallStatus, text: str, duration_ms: float, claim: Claim | None
               ) -> tuple[ToolCallRecord, str]:
        """The call's record with its result, written to the journal over ``claim``."""
        record = self.ended(record, status, text, duration_ms)
        if journal is not None and claim is not None:
            done = journal.finish(record, text, claim)
            return done.record, done.text
        return record, text

    def ended(self, record: ToolCallRecord, status: ToolCallStatus, text: str,
              duration_ms: float) -> ToolCallRecord:
        """The record of a call that ended, counted in the worker's metrics."""
        record = ended(record, status, text, duration_ms, self.run.organization)
        if self.run.on_ended is not None:
            self.run.on_ended(record)
        return record


def call_tool(toolbox: Toolbox, name: str, arguments: dict[str, JsonValue], timeout_s: float,
              max_bytes: int) -> tuple[ToolCallStatus, str]:
    """Run a tool on this worker: its status and its result (cut to ``max_bytes``), a
    failure or a timeout told as the result."""
    try:
        text = toolbox.call(name, arguments, timeout_s)
    except TimeoutError:
        return ToolCallStatus.TIMEOUT, f"{name} outlasted its {timeout_s:g}s"
    except ToolError as error:
        return ToolCallStatus.ERROR, one_line(str(error))
    except Exception as error:  # noqa: BLE001 - a source's failure is the tool's error
        return ToolCallStatus.ERROR, one_line(f"{type(error).__name__}: {error}")
    return ToolCallStatus.OK, cap_bytes(text, max_bytes)


def ended(record: ToolCallRecord, status: ToolCallStatus, text: str, duration_ms: float,
          organization: str = DEFAULT_ORGANIZATION) -> ToolCallRecord:
    """The record of a tool call of a room of ``organization`` that ended (its result's
    excerpt), counted in the worker's metrics."""
    metrics.observe_tool_call(record.tool, status.value, duration_ms / 1000, organization)
    return record.model_copy(update={"status": status, "duration_ms": duration_ms,
                                     "result": cap_bytes(text, EXCERPT_BYTES)})


def parse_arguments(text: str) -> tuple[dict[str, JsonValue], str]:
    """The model's arguments as an object, and the problem with them ("" when none)."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError as error:
        return {}, f"the arguments are not JSON: {error}"
    if not isinstance(value, dict):
        return {}, "the arguments are not a JSON object"
    return value, ""


def one_line(text: str) -> str:
    """``text`` on one line."""
    return " ".join(text.split())
