"""One call of an agent's model, of any kind: get its output, parse it, account for it.

A failed call is a silent answer that says why: its ``error`` text, and its ``error_kind``,
told here where it happened (a scripted entry's error, or whatever workers.llm's call
raised) or by the parser (no respond tool call, output it could not read).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    AgentSpec,
    Answer,
    AnswerStatus,
    CallKind,
    CallRequest,
    ErrorKind,
    Message,
    ToolCallRecord,
)
from parley.shared.settings import Settings
from parley.workers.credentials import KeyRefusal, redact_keys
from parley.workers.deadlines import DeadlinePassed
from parley.workers.parsing import ParsedBid, parse_respond, parse_text
from parley.workers.prompts import CALL_PROMPTS, NO_POLICY_TOOLS, ChatMessage, PolicyTools
from parley.workers.scripted import ScriptedError, scripted_completion, scripted_tool_step
from parley.workers.streaming import ChunkWriter
from parley.workers.tools.loop import ModelStep, ToolLoop, ToolRun, function_name, read_step
from parley.workers.tools.toolbox import Toolbox, ToolUnavailable

log = structlog.get_logger("parley.worker")

Transcript = Callable[[], list[Message]]

ERROR_CHARS = 500
# litellm repeats the class in the message ("litellm.AuthenticationError: AuthenticationError:
# OpenAIException - ..."); the recorded error names the class once.
_CLASS_PREFIX = re.compile(r"^(?:litellm\.)?[A-Za-z]*(?:Error|Exception|Timeout):\s+")


@dataclass(frozen=True)
class Call:
    """Which call this is: its turn and phase, its kind, and the agent's call number."""

    turn: int
    attempt: int
    kind: CallKind = CallKind.BID
    phase: int = 0
    number: int = 0  # 0 for a request that does not number its calls: the turn stands in
    # The input the call takes: an operator's instruction, or an intent-mode winner's intent.
    instruction: str = ""
    # What is left of the room's spending limits: the call's output is capped by it.
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    # The room's organization: its own provider keys, where this worker has them.
    organization: str = DEFAULT_ORGANIZATION


# An external agent's turn (workers.acp): the call, its transcript, deadline and text stream
# to its answer's text and the tool calls it reported.
ExternalTurn = Callable[[Call, Transcript, float, ChunkWriter | None],
                        tuple[str, list[ToolCallRecord]]]


class NoExternalTurn(RuntimeError):
    """An ACP agent's call of a kind it cannot answer (one whose answer is not posted)."""


def call_in(request: CallRequest, agent: str) -> Call:
    """The call a request makes of one of its agents."""
    return Call(request.turn, request.attempt, request.kind, request.phase,
                request.calls.get(agent, 0), request.instructions.get(agent, ""),
                request.max_tokens, request.max_cost_usd, request.organization)


def answer_call(agent: AgentSpec, room_agents: list[AgentSpec], call: Call,
                transcript: Transcript, deadline: float, stream: ChunkWriter | None = None, *,
                settings: Settings, tools: ToolRun | None = None,
                policy_tools: PolicyTools = NO_POLICY_TOOLS,
                external: ExternalTurn | None = None) -> Answer:
    """Ask the agent's model for the call's answer; any failure is a silent answer with the
    reason. With ``stream`` (a call whose answer is posted), the text goes to it as the
    model writes it, all of it before this returns; a call that fails midway leaves its
    chunks unfinished (its failed answer tells followers they were abandoned). The worker's
    ``settings`` say which keys it lends, and where; ``tools`` what an agent's tools run
    with (a call whose answer is posted runs the agent's tool loop: workers.tools.loop),
    ``policy_tools`` the policy's own tools its kind offers beside them (a call of one
    ends the call, on its answer); ``external`` runs an ACP agent's turn."""
    started = time.perf_counter()
    turn = call.turn
    answer = Answer(agent=agent.name, turn=turn, attempt=call.attempt, kind=call.kind,
                    phase=call.phase, call=call.number, answer_id=new_answer_id())
    usage: dict[str, Any]
    raw: Any
    loop: ToolLoop | None = None
    ended_by, beside = None, ""
    reported: list[ToolCallRecord] | None = None
    try:
        on_text = stream.write if stream is not None else None
        if agent.is_acp:
            if external is None or not CALL_PROMPTS[call.kind].streams:
                raise NoExternalTurn(f"an ACP agent answers only turns whose answer is "
                                     f"posted, not a {call.kind.value} call")
            raw, reported = external(call, transcript, deadline, stream)
            usage = {}
        elif uses_tools(agent, call.kind, policy_tools):
            run = tools or ToolRun(Toolbox())
            loop = ToolLoop(agent, run.toolbox.resolve(agent.tools),
                            f"{turn}.{call.phase}.{call.number or turn}", run, deadline,
                            policy_tools)
            step = model_step(agent, room_agents, call, transcript, on_text, settings)
            result = loop.loop(step)
            raw, usage, ended_by = result.raw, result.usage, result.policy_call
            if ended_by is not None:
                beside = text_beside(agent, call, raw, deadline, on_text)
        elif agent.is_scripted:
            raw, usage = scripted_completion(agent, call.number or turn, deadline, on_text), {}
        else:
            from parley.workers.llm import call_model  # imports litellm: only for real agents

            raw, usage = call_model(agent, room_agents, transcript(), deadline, call.kind,
                                    on_text=on_text, instruction=call.instruction,
                                    settings=settings, left=(call.max_tokens, call.max_cost_usd),
                                    organization=call.organization)
        if stream is not None:
            stream.finish()
    except Exception as error:  # noqa: BLE001 - any failure is this agent's silence
        kind = failure_kind(agent, error)
        # A call that ran into the turn's deadline is a timeout, as one that never answered
        # is: the policies, and the re-ask of a turn nobody answered, treat both alike.
        status = AnswerStatus.TIMEOUT if isinstance(error, DeadlinePassed) else AnswerStatus.ERROR
        answer = answer.model_copy(update={
            "status": status, "error": describe_error(error, settings),
            "error_kind": kind, "error_variable": failure_variable(agent, error, kind)})
        log.warning("call_failed", agent=agent.name, model=agent.model, turn=turn,
                    kind=call.kind.value, error=answer.error, error_kind=answer.error_kind.value)
    else:
        # A call that forced the respond tool is read as that call; any other, as text.
        forced = CALL_PROMPTS[call.kind].forces is not None
        if ended_by is not None:
            parsed = ParsedBid(message=beside)
        else:
            parsed = parse_respond(raw) if forced else parse_text(raw)
        status = AnswerStatus.UNPARSED if parsed.error else AnswerStatus.OK
        answer = answer.model_copy(update={"score": parsed.score, "message": parsed.message,
                                           "status": status, "error": parsed.error,
                                           "error_kind": parsed.error_kind,
                                           "policy_call": ended_by, **usage})
        if parsed.error:
            log.warning("answer_unparsed", agent=agent.name, model=agent.model, turn=turn,
                        kind=call.kind.value, error=parsed.error,
                        error_kind=parsed.error_kind.value)
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    used = {"tool_calls": list(loop.records)} if loop is not None else {}
    if reported:
        used = {"tool_calls": reported}
    return answer.model_copy(update={"latency_ms": latency_ms, **used})


def text_beside(agent: AgentSpec, call: Call, raw: Any, deadline: float,
                on_text: Callable[[str], None] | None) -> str:
    """The text posted beside a call of the policy's tool: what a model wrote with it, or
    a scripted agent's answering entry of that call (both streamed as they come)."""
    if agent.is_scripted:
        raw = scripted_completion(agent, call.number or call.turn, deadline, on_text)
        return parse_text(raw).message
    text = read_step(raw).content
    if on_text is not None and text:
        on_text(text)
    return text.strip()


def uses_tools(agent: AgentSpec, kind: CallKind,
               policy_tools: PolicyTools = NO_POLICY_TOOLS) -> bool:
    """True when the call runs the agent's tool loop: the agent names tools (or the call's
    kind offers the policy's) and the call's answer is posted (never a bid, an intent, a
    selector's pick or a dispatch)."""
    offers = bool(agent.tools or policy_tools.offered or policy_tools.prefix)
    return offers and CALL_PROMPTS[kind].streams


def model_step(agent: AgentSpec, room_agents: list[AgentSpec], call: Call,
               transcript: Transcript, on_text: Callable[[str], None] | None,
               settings: Settings) -> ModelStep:
    """One model step of the agent's tool loop: a scripted agent's next tool_calls entry
    (then its answering entry), or a real model's call through litellm. Only the step
    that answers writes the message's text, as it comes."""
    number = call.number or call.turn
    if agent.is_scripted:
        def scripted_step(round_: int, conversation: list[ChatMessage],
                          tools: list[dict[str, Any]], final: bool, deadline: float
                          ) -> tuple[Any, dict[str, Any]]:
            raw = None if final else scripted_tool_step(agent, number, round_, deadline,
                                                        function_name)
            return raw or scripted_completion(agent, number, deadline, on_text), {}

        return scripted_step
    from parley.workers.llm import call_model  # imports litellm: only for real agents

    def llm_step(round_: int, conversation: list[ChatMessage], tools: list[dict[str, Any]],
                 final: bool, deadline: float) -> tuple[Any, dict[str, Any]]:
        # The last step still carries the tools (a conversation with tool calls needs
        # them at some providers), with tool_choice none: only text comes back.
        raw, usage = call_model(
            agent, room_agents, transcript(), deadline, call.kind,
            on_text=on_text if final else None, instruction=call.instruction,
            settings=settings, left=(call.max_tokens, call.max_cost_usd), tools=tools,
            tool_choice="none" if final else "auto", conversation=conversation,
            organization=call.organization)
        if not final and on_text is not None:
            step = read_step(raw)
            if not step.calls:
                on_text(step.content)  # the answer came without a tool call: all at once
        return raw, usage

    return llm_step


def new_answer_id() -> str:
    """A fresh id for an answer: 64 random bits, plenty among a room's last answers."""
    return secrets.token_hex(8)


def failure_kind(agent: AgentSpec, error: Exception) -> ErrorKind:
    """The kind of failure a call raised: a scripted entry's error, a deadline that came
    first, or (for an agent with a real model) what workers.llm tells of its call's error."""
    if isinstance(error, ScriptedError):
        return ErrorKind.SCRIPTED
    if isinstance(error, DeadlinePassed):
        return ErrorKind.TIMEOUT
    if isinstance(error, ToolUnavailable):
        return ErrorKind.TOOL_UNAVAILABLE
    if agent.is_scripted or agent.is_acp:
        return ErrorKind.OTHER
    from parley.workers.llm import classify_error  # imports litellm: only for real agents

    return classify_error(error)


def failure_variable(agent: AgentSpec, error: Exception, kind: ErrorKind) -> str:
    """The key variable a failed call names: the one parley's own refusal is about, or (a
    real model's missing key) the one the provider asked for; "" when none."""
    if isinstance(error, KeyRefusal):
        return error.variable
    if kind is not ErrorKind.MISSING_KEY or agent.is_scripted or agent.is_acp:
        return ""
    from parley.workers.llm import provider_key_variable  # imports litellm: only for real agents

    return provider_key_variable(error)


def describe_error(error: BaseException, settings: Settings) -> str:
    """``ClassName: message`` on one line: the class once, no traceback, no key the worker
    lends (its ``settings``: a provider may echo one back), bounded length."""
    message = redact_keys(str(error).split("\nTraceback", 1)[0], settings)
    previous = None
    while previous != message:
        previous, message = message, _CLASS_PREFIX.sub("", message, count=1)
    message = " ".join(message.split())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 3] + "..."
