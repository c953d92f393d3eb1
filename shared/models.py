"""The public data shapes: room specs (the YAML contract), messages, answers, turn records."""

from __future__ import annotations

import math
import operator
import re
from enum import StrEnum
from functools import reduce
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    ModelWrapValidatorHandler,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    ValidationInfo,
    computed_field,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from parley.shared.litellm_args import NO_CREDENTIALS, check_litellm_kwargs, url_credentials
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.speakers import name_skeleton
from parley.shared.spec_limits import (
    MAX_AGENTS_CONTEXT,
    MAX_BUDGET_TOKENS,
    MAX_BUDGET_USD,
    MAX_CONTEXT_TOKENS,
    MAX_DURATION_S,
    MAX_PLAIN_INT,
    MAX_REPLY_TOKENS,
    MAX_RUN_MESSAGES,
    NotText,
    SpecTooLarge,
    check_agent_count,
    check_document_size,
    check_stored_size,
    is_stored,
)
from parley.shared.unknown_fields import has_unknown, with_hints

SCRIPTED_MODEL = "scripted"
# ``model: acp/<profile>``: an external agent over ACP, run from a profile of the workers.
ACP_MODEL_PREFIX = "acp/"
_ACP_PROFILE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
# The Celery queue of a profile's calls: only workers that run the profile consume it.
ACP_QUEUE_PREFIX = "parley.acp."
# What a spec may never give an agent: an ACP agent's process is the operator's profile.
_PROCESS_FIELDS = ("command", "cwd", "env")
SEED_SENDER = "User"
# The organization of rooms created without one (single-tenant clusters have no other).
DEFAULT_ORGANIZATION = "default"
# The sender of parley's own notices in a room: neither a person nor an agent may use it.
SYSTEM_SENDER = "parley"
SELECTOR_NAME = "selector"
DISPATCH_NAME = "dispatch"  # a mention room's classifier, as its calls name it
# Always fullmatch: "$" would also match before a final newline.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}\Z")
_MODEL = re.compile(r"\S{1,200}\Z")
_URL = re.compile(r"https?://[^\s/]+\S*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_QUEUE = re.compile(r"[A-Za-z0-9_.:\-]{1,200}\Z")
MAX_AGENT_TOOLS = 128
# A tool as a spec names it: a Python tool's name, ``<server>/<tool>``, or ``<server>/*``.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}(/([A-Za-z0-9_.\-]{1,128}|\*))?\Z")


def _tool_name(name: str) -> str:
    if not _TOOL_NAME.fullmatch(name):
        raise ValueError("not a tool name: a tool's name (letters, digits, '_', '.', '-'), "
                         "<server>/<tool> or <server>/* (see parley tools)")
    return name


ToolName = Annotated[str, AfterValidator(_tool_name)]
# An agent's tools may name all of an MCP server's tools as "<server>/*".
SERVER_WILDCARD = "/*"


def tool_covered(name: str, tools: list[str]) -> bool:
    """True when ``tools`` (an agent's, as its spec names them) include the tool ``name``:
    by its own name, or as one of its server's (``github/*`` covers ``github/create_issue``)."""
    if name in tools:
        return True
    server, slash, _tool = name.partition("/")
    return bool(slash) and f"{server}{SERVER_WILDCARD}" in tools


def name_key(name: str) -> str:
    """A name as it is told apart from others: case and spacing aside (``Optimist``,
    ``optimist`` and ``Optimist `` are one participant)."""
    return " ".join(name.split()).casefold()


def check_person_name(name: str) -> str:
    """``name`` if a person may post under it: the agents' pattern (1-64 letters, digits,
    spaces, '_', '.' or '-', the whole name) and not the reserved sender; else ValueError."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"sender {name!r} must be 1-64 letters, digits, spaces, '_', '.' or "
                         "'-', starting with a letter or digit")
    if name_skeleton(name) == name_skeleton(SYSTEM_SENDER):
        raise ValueError(f"{name!r} is reserved for parley's own notices: people post under "
                         "their own names")
    return name


def _bounded(document: Any, info: ValidationInfo) -> Any:
    """``document`` unchanged, or one clear error when it is over a spec size bound or
    holds a string that is not text (a stored spec's was checked as it was written)."""
    if is_stored(info.context):
        return document
    try:
        check_document_size(document)
    except SpecTooLarge as error:
        raise PydanticCustomError("spec_too_large", str(error)) from None
    except NotText as error:
        raise PydanticCustomError("spec_not_text", str(error)) from None
    return document


def _oversized_int(value: Any) -> int | None:
    """The first integer, at any depth of plain data, that does not fit in 64 bits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if abs(value) > MAX_PLAIN_INT else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((found for found in map(_oversized_int, items) if found is not None), None)


def _within_64_bits(value: JsonValue, info: ValidationInfo) -> JsonValue:
    """``value`` unchanged; ValueError when an integer in it does not fit in 64 bits (a
    stored spec's was checked as it was written)."""
    if not is_stored(info.context) and _oversized_int(value) is not None:
        raise ValueError(f"integers must fit in 64 bits (at most {MAX_PLAIN_INT:,} either way)")
    return value


class Strict(BaseModel):
    """Base for spec models: unknown fields are an error, not silently dropped."""

    # Infinity and NaN validate as floats but JSON stores them as null: refused everywhere.
    # Errors never print the input: a refused value may be a credential, or an alias bomb
    # whose repr never ends.
    # A field's docstring is its description in the spec's JSON schema (`parley schema`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              hide_input_in_errors=True, use_attribute_docstrings=True)

    @model_validator(mode="wrap")
    @classmethod
    def _unknown_fields_hinted(cls, data: Any, handler: ModelWrapValidatorHandler[Strict]
                               ) -> Strict:
        # An unknown field is named with the nearest valid ones, not only refused.
        try:
            return handler(data)
        except ValidationError as error:
            if not has_unknown(error):
                raise
            raise with_hints(error, list(cls.model_fields)) from None


class ScriptedToolCall(Strict):
    """One tool call a scripted model step asks for: the tool as the spec names it, and
    its arguments."""

    name: str = Field(min_length=1, max_length=200)
    """The tool, as the agent's `tools` name it (or a handoff room's `transfer_to_<agent>`)."""
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    """The call's arguments, as the model would give them."""


class ScriptEntry(Strict):
    """One scripted model output. Exactly one of: a respond call (score and/or message),
    raw tool-call ``arguments``, plain ``content``, ``tool_calls`` of the agent's tools
    (a step of a call's tool loop: the entries after it answer the same call), or an
    ``error`` to raise."""

    score: JsonValue = None
    """A respond call's score (0 to 1; a number outside is clamped, text is kept as written)."""
    message: JsonValue = None
    """A respond call's message (a reply's text in rooms that do not bid)."""
    arguments: str | None = None
    """Raw tool-call arguments, parsed as a provider's would be."""
    content: str | None = None
    """Plain text with no tool call (a silent bid in a full-mode bid room)."""
    tool_calls: list[ScriptedToolCall] | None = Field(default=None, min_length=1, max_length=64)
    """Tool calls of the agent's tools: a step of the call's tool loop; the entries after it
    answer the same call."""
    error: str | None = None
    """The call raises this error (recorded as the agent's failure)."""
    sleep: float = Field(default=0.0, ge=0, le=MAX_DURATION_S)
    """Seconds to wait first; ends at the call's deadline or at worker shutdown."""

    @field_validator("score", mode="before")
    @classmethod
    def _clamped_score(cls, score: Any) -> Any:
        # The parser clamps a provider's score into [0, 1]; a script's is clamped the same
        # way before it is stored, where JSON would turn .inf into null.
        if isinstance(score, bool) or not isinstance(score, int | float):
            return score
        if isinstance(score, float) and math.isnan(score):
            raise ValueError("NaN is not a score (a provider's NaN score is an unparsed bid: "
                             "script one with arguments)")
        return score if 0 <= score <= 1 else float(score > 1)

    @field_validator("score", "message")
    @classmethod
    def _plain_values(cls, value: JsonValue, info: ValidationInfo) -> JsonValue:
        return _within_64_bits(value, info)

    @model_validator(mode="after")
    def _one_shape(self) -> ScriptEntry:
        given = self.model_fields_set - {"sleep"}
        shapes = [
            bool(given & {"score", "message"}),
            "arguments" in given,
            "content" in given,
            "tool_calls" in given,
            "error" in given,
        ]
        if sum(shapes) != 1:
            raise ValueError(
                "a script entry is exactly one of {score, message}, {arguments}, "
                "{content}, {tool_calls} or {error} (with an optional sleep)"
            )
        return self

    @model_serializer(mode="wrap")
    def _only_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Which fields were given is the entry's meaning: {score: null} is not {}.
        data = handler(self)
        return {name: value for name, value in data.items()
                if name in self.model_fields_set or name == "sleep"}

    @property
    def is_respond_call(self) -> bool:
        """True when the entry stands for a respond(score, message) tool call."""
        return bool(self.model_fields_set & {"score", "message"})


MAX_TASK_S = 86400.0  # the longest a background task may run: a day


class BackgroundSpec(Strict):
    """How an agent's long work runs as tasks, off the floor (seed 003, "Talking and working:
    tasks"): it gets the `work_in_background` tool."""

    hand_back: Literal["relay", "post"] = "relay"
    """`relay`: the agent is told the result and says it in a turn of its own, at the front of
    the queue (a discussion room's) or at the next turn boundary (other rooms; a new run when
    none is under way); `post`: the result is posted as it is, as the agent's message."""
    worker: str | None = None
    """The agent of the room that works the agent's tasks; unset, the agent itself."""
    max_s: float = Field(default=3600.0, gt=0, le=MAX_TASK_S)
    """How long a task may run before it is `timed_out`, in seconds."""


class AgentSpec(Strict):
    """An agent is data: who it is, which model answers for it, and where its tasks go."""

    name: str
    """Unique in the room: 1-64 letters, digits, spaces, `_`, `.` or `-`; `User` and `parley` are
    reserved."""
    role: str = ""
    """A short line of what the agent does, shown to the other agents and on the dashboard."""
    description: str = ""
    """What the agent is for, beside its role: the others, the selector, the dispatch classifier
    and the dashboard read both."""
    system_prompt: str = ""
    """The agent's instructions, ahead of the room's own."""
    model: str
    """A litellm model string (`openai/gpt-4o-mini`), or `scripted` to replay `script` offline."""
    script: list[ScriptEntry] | None = None
    """For `model: scripted`: entry k answers the agent's k-th call in the room."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature passed to the model (provider default when unset)."""
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_REPLY_TOKENS)
    """The most tokens a reply may use (lowered further by the room's spending limits)."""
    api_base: str | None = None
    """An OpenAI-compatible server's URL for this agent (no credentials in it)."""
    api_key_env: str | None = None
    """The environment variable on the workers that holds the key (never the key); it must be
    allow-listed there."""
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    """The agent's own deadline per call, when sooner than the policy's."""
    max_context_tokens: int | None = Field(default=None, ge=256, le=MAX_CONTEXT_TOKENS)
    """Trim the transcript in its prompts to this many tokens (the task is kept)."""
    litellm_kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    """Further litellm.completion arguments, from an allow-list."""
    queue: str = DEFAULT_QUEUE
    """The Celery queue its calls go to: workers consuming it answer for the agent."""
    tools: list[ToolName] = Field(default_factory=list, max_length=MAX_AGENT_TOOLS)
    """The workers' tools the agent may call (`search_logs`, `grafana/query`, `github/*` for all
    of a server's): only workers define tools, a spec names them."""
    max_tool_rounds: int = Field(default=5, ge=1, le=50)
    """Tool-calling rounds one call may take before it must answer."""
    approve: list[ToolName] = Field(default_factory=list, max_length=MAX_AGENT_TOOLS)
    """Tools of the agent's that wait for a person's approval even where the worker does not ask
    for it: a spec may add approvals, never remove one."""
    instructions: str = Field(default="", max_length=20_000)
    """For `model: acp/<profile>`: what the external agent is told once, at the start of its
    session (its system prompt is its own)."""
    background: BackgroundSpec | None = None
    """Long work as tasks off the floor: set, the agent gets the `work_in_background` tool and
    hosts may start tasks for it."""

    @model_validator(mode="before")
    @classmethod
    def _bounded_agent(cls, data: Any, info: ValidationInfo) -> Any:
        # Bounded on its own too: GroupChat and the Python API build agents before rooms.
        return _bounded(data, info)

    @model_validator(mode="before")
    @classmethod
    def _no_process(cls, data: Any) -> Any:
        # Said before "unknown field": a spec that tries to start a process is told why not.
        given = next((name for name in _PROCESS_FIELDS if isinstance(data, dict) and name in data),
                     None)
        if given is not None:
            raise ValueError(f"a spec never gives an agent's {given}: external agents run from "
                             "the workers' ACP profiles (PARLEY_WORKER_ACP_CONFIG); name one "
                             "with model: acp/<profile>")
        return data

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(
                "must be 1-64 letters, digits, spaces, '_', '.' or '-', starting with a letter "
                "or digit"
            )
        # Told apart as a reader tells names apart, so that no room makes its task's poster
        # an agent.
        if name_skeleton(name) == name_skeleton(SEED_SENDER):
            raise ValueError(f"{SEED_SENDER!r} is reserved for the person who posts the task")
        if name_skeleton(name) == name_skeleton(SYSTEM_SENDER):
            raise ValueError(f"{SYSTEM_SENDER!r} is reserved for parley's own notices")
        return name

    @field_validator("model")
    @classmethod
    def _valid_model(cls, model: str) -> str:
        if not _MODEL.fullmatch(model):
            raise ValueError("must be a litellm model string such as openai/gpt-4o-mini "
                             f"(no spaces), or {SCRIPTED_MODEL!r}")
        return model

    @field_validator("api_base")
    @classmethod
    def _valid_api_base(cls, api_base: str | None) -> str | None:
        if api_base is None:
            return None
        if not _URL.fullmatch(api_base):
            raise ValueError("must be an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1")
        credentials = url_credentials(api_base)
        if credentials:
            raise ValueError(f"{credentials!r} in the URL: {NO_CREDENTIALS}")
        return api_base

    @field_validator("api_key_env")
    @classmethod
    def _valid_api_key_env(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.fullmatch(name):
            raise ValueError("must name an environment variable (letters, digits and '_', "
                             "e.g. OPENAI_API_KEY), not hold the key itself")
        return name

    @field_validator("queue")
    @classmethod
    def _valid_queue(cls, queue: str) -> str:
        if not _QUEUE.fullmatch(queue):
            raise ValueError("must be a Celery queue name: letters, digits, '_', '.', ':' "
                             "or '-' (e.g. parley.local)")
        return queue

    @field_validator("litellm_kwargs")
    @classmethod
    def _allowed_arguments(cls, kwargs: dict[str, JsonValue], info: ValidationInfo
                           ) -> dict[str, JsonValue]:
        check_litellm_kwargs(kwargs)
        _within_64_bits(kwargs, info)
        return kwargs

    @model_validator(mode="after")
    def _script_only_for_scripted(self) -> AgentSpec:
        if self.model == SCRIPTED_MODEL and self.script is None:
            raise ValueError("a scripted agent needs a script (a list of entries)")
        if self.model != SCRIPTED_MODEL and self.script is not None:
            raise ValueError(f"script is only for agents with model: {SCRIPTED_MODEL}")
        return self

    @model_validator(mode="after")
    def _acp_profile_named(self) -> AgentSpec:
        if not self.is_acp:
            if self.instructions:
                raise ValueError("instructions are for ACP agents (model: acp/<profile>): "
                                 "give another agent a system_prompt")
            return self
        if not _ACP_PROFILE.fullmatch(self.acp_profile):
            raise ValueError("model acp/<profile> names a profile of 1-64 letters, digits, "
                             "'_' or '-'")
        if self.tools or self.script is not None or self.api_base or self.litellm_kwargs:
            raise ValueError(f"agent {self.name!r} is an ACP agent: its tools and model are "
                             "its own, so it takes no tools, script, api_base or "
                             "litellm_kwargs")
        if self.queue != DEFAULT_QUEUE:
            raise ValueError(f"an ACP agent's calls go to its profile's queue "
                             f"({self.call_queue}): drop queue")
        return self

    @model_validator(mode="after")
    def _approves_its_own_tools(self) -> AgentSpec:
        stray = next((name for name in self.approve if not tool_covered(name, self.tools)), None)
        if stray is not None:
            raise ValueError(f"approve names {stray!r}, which is not one of the agent's tools "
                             f"({', '.join(self.tools) or 'none'}): approve only tools it may call")
        return self

    @model_validator(mode="after")
    def _reply_fits_context(self) -> AgentSpec:
        if self.max_tokens and self.max_context_tokens and self.max_tokens >= self.max_context_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be smaller than "
                             f"max_context_tokens ({self.max_context_tokens})")
        return self

    @property
    def is_scripted(self) -> bool:
        """True when the agent replays a script instead of calling an LLM."""
        return self.model == SCRIPTED_MODEL

    @property
    def is_acp(self) -> bool:
        """True when an external agent over ACP answers for it (``model: acp/<profile>``)."""
        return self.model.startswith(ACP_MODEL_PREFIX)

    @property
    def acp_profile(self) -> str:
        """The workers' ACP profile it runs from (``""`` for another agent)."""
        return self.model[len(ACP_MODEL_PREFIX):] if self.is_acp else ""

    @property
    def call_queue(self) -> str:
        """The queue its calls go to: its profile's for an ACP agent, else ``queue``."""
        return ACP_QUEUE_PREFIX + self.acp_profile if self.is_acp else self.queue


class PolicyConfig(Strict):
    """What every floor policy's config has: its kind (the spec's ``policy.kind``), how
    long each of its calls may take, and the callers it adds to the room's agents. Each
    policy's config is a subclass, listed in POLICY_CONFIGS."""

    if TYPE_CHECKING:
        kind: str  # each config's own Literal field

    @property
    def call_timeout(self) -> float:
        """Seconds each phase's calls may take."""
        raise NotImplementedError

    @property
    def own_callers(self) -> tuple[AgentSpec, ...]:
        """Who besides the room's agents the policy's calls go to (a selector)."""
        return ()

    def check_agents(self, names: tuple[str, ...]) -> None:
        """ValueError naming what is wrong when the config does not fit the room's agents
        (called ``names``, in spec order); nothing to check by default."""


class BidPolicy(PolicyConfig):
    """swarms GroupChat bidding: the highest recency-adjusted bid strictly above threshold."""

    kind: Literal["bid"] = "bid"
    """The floor policy: `bid` (the default)."""
    threshold: float = Field(default=0.5, ge=0, le=1)
    """A bid must beat this, strictly, after the recency penalty."""
    recency_penalty: float = Field(default=0.3, ge=0)
    """Subtracted from the scores of the last max(1, recency_window) speakers."""
    # Kept as given; 0 or below penalises the last speaker, as 1 does: swarms'
    # max(1, recency_window).
    recency_window: int = Field(default=1, ge=-MAX_PLAIN_INT, le=MAX_RUN_MESSAGES)
    """How many of the last speakers are penalised; 0 or below counts as 1 (swarms' max(1,
    recency_window))."""
    max_messages: int = Field(default=20, ge=1, le=MAX_RUN_MESSAGES)
    """Messages a run may hold, the task included (swarms' max_loops)."""
    bid_timeout_s: float = Field(default=30.0, gt=0, le=MAX_DURATION_S)
    """Agents that have not bid by then are silent this turn."""
    bid_mode: Literal["full", "intent"] = "full"
    """`full`: each bid carries its whole message (swarms); `intent`: each bid is a one-line
    intent and only the winner then writes its message."""
    intent_max_tokens: int = Field(default=60, ge=1, le=MAX_REPLY_TOKENS)
    """Intent mode: the most tokens an intent may use."""

    @property
    def call_timeout(self) -> float:
        """Seconds each phase's calls may take."""
        return self.bid_timeout_s


class SelectorPolicy(PolicyConfig):
    """Seed 002: a selector model names who speaks next, or TERMINATE."""

    kind: Literal["selector"]
    """The floor policy: `selector`."""
    selector: AgentSpec
    """The selector model: every agent field except `name` (it is `selector`)."""
    max_turns: int = Field(default=12, ge=1, le=MAX_RUN_MESSAGES)
    """Participant messages per run."""
    allow_repeat: bool = False
    """Whether the last speaker may be picked again."""
    call_timeout_s: float = Field(default=60.0, gt=0, le=MAX_DURATION_S)
    """Deadline of each selector or participant call."""

    @field_validator("selector", mode="before")
    @classmethod
    def _named_selector(cls, selector: Any) -> Any:
        # The selector is not a participant: it has no name of its own in the spec.
        if isinstance(selector, dict):
            if selector.get("name", SELECTOR_NAME) != SELECTOR_NAME:
                raise ValueError("the selector takes every agent field except name")
            return {**selector, "name": SELECTOR_NAME}
        return selector

    @property
    def call_timeout(self) -> float:
        """Seconds each selector or participant call may take."""
        return self.call_timeout_s

    @property
    def own_callers(self) -> tuple[AgentSpec, ...]:
        """The selector."""
        return (self.selector,)


def policy_kind(policy: Any) -> Any:
    """A policy's kind: a spec that names none asks for the default, ``bid``."""
    if isinstance(policy, dict):
        return policy.get("kind", "bid")
    return getattr(policy, "kind", None)


class RoundtablePolicy(PolicyConfig):
    """Seed 004: the panelists speak in spec order, ``rounds`` times over; then the
    moderator (one of the agents, not a panelist) gives the verdict that ends the run."""

    kind: Literal["roundtable"]
    """The floor policy: `roundtable`."""
    moderator: str = Field(min_length=1, max_length=64)
    """The agent that gives the verdict: one of the agents, not a panelist."""
    rounds: int = Field(default=1, ge=1, le=MAX_RUN_MESSAGES)
    """Times each panelist speaks before the verdict."""
    call_timeout_s: float = Field(default=60.0, gt=0, le=MAX_DURATION_S)
    """Deadline of each panelist's or the moderator's call."""

    @property
    def call_timeout(self) -> float:
        """Seconds each panelist's or the moderator's call may take."""
        return self.call_timeout_s


class DispatchSpec(Strict):
    """A classifier that decides which agents take a message that names nobody: its model
    (as an agent's: scripted too), and how its judgments are read."""

    model: str = Field(min_length=1)
    """The classifier's litellm model string, or `scripted`."""
    script: list[ScriptEntry] | None = None
    """For `model: scripted`: the classifier's answers, one per call."""
    system_prompt: str = ""
    """Instructions ahead of the classifier's own prompt."""
    api_base: str | None = None
    """An OpenAI-compatible server's URL for the classifier."""
    api_key_env: str | None = None
    """The environment variable on the workers that holds its key."""
    litellm_kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    """Further litellm.completion arguments, from an allow-list."""
    queue: str = DEFAULT_QUEUE
    """The Celery queue its calls go to."""
    threshold: float = Field(default=0.5, ge=0, le=1)
    """A candidate whose probability reaches this takes the message."""
    max_agents: int = Field(default=2, ge=1, le=64)
    """The most agents one message is dispatched to, likeliest first."""
    timeout_s: float = Field(default=5.0, gt=0, le=MAX_DURATION_S)
    """Deadline of the classifier's call; past it the rule without dispatch decides."""

    @model_validator(mode="after")
    def _callable(self) -> DispatchSpec:
        _ = self.agent  # the classifier is an agent's call: its model fields must hold
        return self

    @property
    def agent(self) -> AgentSpec:
        """The classifier as the caller its calls go to."""
        return AgentSpec(name=DISPATCH_NAME, role="dispatcher", model=self.model,
                         script=self.script, system_prompt=self.system_prompt,
                         api_base=self.api_base, api_key_env=self.api_key_env,
                         litellm_kwargs=self.litellm_kwargs, queue=self.queue,
                         timeout_s=self.timeout_s)


class MentionPolicy(PolicyConfig):
    """Seed 003: whoever is addressed (``@name``) speaks next, from a speak queue the room
    keeps across runs; agents wait for a person's answer."""

    kind: Literal["mention"]
    """The floor policy: `mention`."""
    everyone: list[str] = Field(default_factory=list)
    """Agents, in order, that take a person's message naming nobody."""
    people: list[str] | None = None
    """The roster: when set, only these post as people (null: every sender not an agent)."""
    addressed_only: bool = False
    """When true, a message naming nobody asks nobody."""
    max_depth: int = Field(default=5, ge=1, le=MAX_RUN_MESSAGES)
    """Agent turns chained from one person's message."""
    max_turns: int | None = Field(default=None, ge=1, le=MAX_RUN_MESSAGES)
    """Agent turns over the room's lifetime (null: no cap); past it the discussion is over."""
    silent_token: str = Field(default="(silent)", min_length=1, max_length=64)
    """An answer that is this token is recorded, never posted."""
    call_timeout_s: float = Field(default=60.0, gt=0, le=MAX_DURATION_S)
    """Deadline of each agent's call."""
    dispatch: DispatchSpec | None = None
    """A classifier that picks who takes a message naming nobody (exclusive with addressed_only)."""

    @field_validator("people")
    @classmethod
    def _people_are_names(cls, people: list[str] | None) -> list[str] | None:
        if people is None:
            return None
        for name in people:
            check_person_name(name)
        duplicates = repeated_names(people)
        if duplicates:
            raise ValueError(f"people must be unique, repeated: {', '.join(duplicates)}")
        return people

    @model_validator(mode="after")
    def _dispatch_or_addressed_only(self) -> MentionPolicy:
        if self.dispatch is not None and self.addressed_only:
            raise ValueError("addressed_only and dispatch are exclusive: drop one")
        return self

    @property
    def call_timeout(self) -> float:
        """Seconds each agent's (or the classifier's) call may take."""
        if self.dispatch is not None:
            return max(self.call_timeout_s, self.dispatch.timeout_s)
        return self.call_timeout_s

    @property
    def own_callers(self) -> tuple[AgentSpec, ...]:
        """The classifier, in a room with dispatch."""
        return (self.dispatch.agent,) if self.dispatch is not None else ()


# A handoff room's generated tools are offered as ``transfer_to_<agent>``.
TRANSFER_PREFIX = "transfer_to_"
_NOT_IN_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
_TOOL_NAME_LENGTH = 64  # what OpenAI accepts as a function's name


def transfer_tool(agent: str) -> str:
    """The name of the tool that hands the floor to ``agent`` (``transfer_to_billing``):
    what OpenAI accepts as a function's name, a space or period as ``_``."""
    return _NOT_IN_TOOL_NAME.sub("_", TRANSFER_PREFIX + agent)[:_TOOL_NAME_LENGTH]


class HandoffPolicy(PolicyConfig):
    """The active agent keeps the floor, turn after turn, until it hands it to another
    with a ``transfer_to_<agent>`` tool call (the swarm shape)."""

    kind: Literal["handoff"]
    """The floor policy: `handoff`."""
    start: str = Field(min_length=1, max_length=64)
    """The agent that holds the floor first."""
    handoffs: dict[str, list[str]] | None = None
    """Agent to the agents it may hand to; null: everyone to everyone; an agent not listed may
    hand to nobody."""
    max_turns: int = Field(default=12, ge=1, le=MAX_RUN_MESSAGES)
    """Agent turns per run."""
    max_handoffs_per_run: int = Field(default=8, ge=0, le=MAX_RUN_MESSAGES)
    """Transfers a run may make; one past it is refused back to the model."""
    call_timeout_s: float = Field(default=60.0, gt=0, le=MAX_DURATION_S)
    """Deadline of each call."""

    @property
    def call_timeout(self) -> float:
        """Seconds each active agent's call may take."""
        return self.call_timeout_s

    def targets(self, agent: str, names: tuple[str, ...]) -> list[str]:
        """Whom ``agent`` may hand the floor to, in spec order (never to itself)."""
        allowed = names if self.handoffs is None else self.handoffs.get(agent, [])
        return [name for name in names if name in allowed and name != agent]

    def check_agents(self, names: tuple[str, ...]) -> None:
        """The start and every name in handoffs are agents; no two agents share a
        transfer tool's name."""
        if self.start not in names:
            raise ValueError(f"policy.start {self.start!r} is not one of the agents "
                             f"({', '.join(names)})")
        for source, targets in (self.handoffs or {}).items():
            unknown = next((name for name in (source, *targets) if name not in names), None)
            if unknown is not None:
                raise ValueError(f"policy.handoffs names {unknown!r}, which is not one of "
                                 f"the agents ({', '.join(names)})")
        tools: dict[str, str] = {}
        for name in names:
            other = tools.setdefault(transfer_tool(name), name)
            if other != name:
                raise ValueError(f"agents {other!r} and {name!r} would share the tool "
                                 f"{transfer_tool(name)}: name one of them otherwise")


# Every floor policy's config: the spec's union of them, its kind list and its error
# message for an unknown kind all come from this tuple (a policy's record, in
# coordinator/policies/, is the rest of it).
POLICY_CONFIGS: tuple[type[PolicyConfig], ...] = (BidPolicy, SelectorPolicy, RoundtablePolicy,
                                                  MentionPolicy, HandoffPolicy)


def config_kind(config: type[PolicyConfig]) -> str:
    """The kind a policy config's ``kind`` field accepts."""
    return str(get_args(config.model_fields["kind"].annotation)[0])


POLICY_KINDS = tuple(config_kind(config) for config in POLICY_CONFIGS)
if TYPE_CHECKING:
    PolicySpec = PolicyConfig
else:
    # One member per config, told apart by its kind (policy_kind).
    PolicySpec = Annotated[
        reduce(operator.or_, (Annotated[config, Tag(config_kind(config))]
                              for config in POLICY_CONFIGS)),
        Discriminator(policy_kind, custom_error_type="policy_kind",
                      custom_error_message=f"kind must be one of: {', '.join(POLICY_KINDS)}"),
    ]


class RoomLimits(Strict):
    """What a room's calls may spend, per run and over the room's whole life; unset, no
    limit. Every answer that reaches Redis counts, of every kind (bids, the selector's
    picks, replies), late or of a cancelled turn: its prompt and completion tokens, and its
    cost as litellm prices it. A run stops with ``budget`` before a turn once a total has
    reached its limit; each call of a turn is capped at what is left (coordinator.policies.
    budget), so a total may end past its limit by the turn's prompts and by its other
    calls' outputs."""

    max_tokens_per_run: int | None = Field(default=None, ge=1, le=MAX_BUDGET_TOKENS)
    """Prompt and completion tokens of one run's calls."""
    max_cost_usd_per_run: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD)
    """US dollars one run's calls may cost, as litellm prices them."""
    max_tokens_per_room: int | None = Field(default=None, ge=1, le=MAX_BUDGET_TOKENS)
    """Tokens over every run of the room."""
    max_cost_usd_per_room: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD)
    """US dollars over every run of the room."""


class Usage(BaseModel):
    """Tokens and cost of calls, summed: a run's or a room's running totals."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached_tokens: int = 0  # of prompt_tokens: read from providers' prompt caches

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens together: what token limits count."""
        return self.prompt_tokens + self.completion_tokens


def check_approvers(approvers: list[str], agents: tuple[str, ...]) -> None:
    """A room's approvers are people's names (as a post's sender), each once, and none
    reads as one of its ``agents``; else ValueError naming the first that is wrong."""
    for name in approvers:
        try:
            check_person_name(name)
        except ValueError as error:
            raise ValueError(f"approvers: {error}") from None
    duplicates = repeated_names(approvers)
    if duplicates:
        raise ValueError(f"approvers names a person twice: {', '.join(duplicates)}")
    skeletons = {name_skeleton(name) for name in agents}
    taken = next((name for name in approvers if name_skeleton(name) in skeletons), None)
    if taken is not None:
        raise ValueError(f"approvers names {taken!r}, which is an agent of the room: an "
                         "approver is a person")


def repeated_names(names: list[str]) -> list[str]:
    """The names (as written) that another name repeats to a reader (the same
    name_skeleton: ``Budget Checker`` and ``Budget_Checker``, ``Vem`` and ``Vern``): a
    selector's pick, a person's post and the impersonation cut could not tell them apart."""
    by_key: dict[str, list[str]] = {}
    for name in names:
        by_key.setdefault(name_skeleton(name), []).append(name)
    return sorted({name for same in by_key.values() if len(same) > 1 for name in same})


# An unknown moderator's error names this many of the agents it could have been.
PANEL_NAMES_SHOWN = 8


def check_panel(moderator: str, names: list[str], rounds: int = 1) -> None:
    """ValueError, naming what is wrong, unless ``moderator`` is one of the agents called
    ``names``, at least one other agent is left to be a panelist, and the debate's
    ``rounds`` fit in a run."""
    if moderator not in names:
        alike = [name for name in names if name_key(name) == name_key(moderator)]
        if alike:
            hint = f"did you mean {alike[0]!r}? (the name as the agent is written)"
        elif names:
            listed = ", ".join(map(repr, names[:PANEL_NAMES_SHOWN]))
            more = ", ..." if len(names) > PANEL_NAMES_SHOWN else ""
            hint = f"name one of {listed}{more}, or add it to agents"
        else:
            hint = "add it to agents"
        raise ValueError(f"the moderator {moderator!r} is not one of the agents: {hint}")
    if len(names) < 2:
        raise ValueError(f"a round-table needs at least one panelist besides the moderator "
                         f"{moderator!r}: add an agent")
    turns = rounds * (len(names) - 1)
    if turns > MAX_RUN_MESSAGES:
        raise ValueError(f"rounds x panelists is {turns:,}: a run posts at most "
                         f"{MAX_RUN_MESSAGES:,} messages, so lower rounds")


def check_mention_names(policy: MentionPolicy, agents: tuple[str, ...]) -> None:
    """A mention room's ``everyone`` names its agents and its people are none of them;
    else ValueError naming the first name that is wrong."""
    keys = {name_key(name) for name in agents}
    unknown = next((name for name in policy.everyone if name_key(name) not in keys), None)
    if unknown is not None:
        raise ValueError(f"policy.everyone names {unknown!r}, which is not an agent of the "
                         f"room ({', '.join(agents)})")
    duplicates = repeated_names(policy.everyone)
    if duplicates:
        raise ValueError(f"policy.everyone names an agent twice: {', '.join(duplicates)}")
    if policy.dispatch is not None and DISPATCH_NAME in keys:
        raise ValueError(f"{DISPATCH_NAME!r} is the classifier's name in a room with dispatch: "
                         "name the agent otherwise")
    # As a post is checked: no person's name may read as an agent's.
    skeletons = {name_skeleton(name) for name in agents}
    taken = next((name for name in policy.people or [] if name_skeleton(name) in skeletons),
                 None)
    if taken is not None:
        raise ValueError(f"policy.people names {taken!r}, which is an agent of the room: "
                         "a person needs a name of their own")


class RoomSpec(Strict):
    """A room: its agents (in order: ties go to the first listed), its floor policy and
    what its calls may spend."""

    name: str = Field(default="room", min_length=1, max_length=100)
    """The room's name; its id is made from it."""
    description: str = ""
    """What the room is for, shown in listings."""
    policy: PolicySpec = Field(default_factory=BidPolicy)
    """The floor policy that picks each turn's speaker, chosen by `kind`."""
    agents: list[AgentSpec]
    """At least two agents with distinct names, in order: ties go to the first listed."""
    limits: RoomLimits = Field(default_factory=RoomLimits)
    """What the room's calls may spend; unset, no limit."""
    approvers: list[str] = Field(default_factory=list, max_length=64)
    """The people who may answer a tool call waiting for approval, by name."""
    approval_timeout_s: float = Field(default=300.0, gt=0, le=MAX_DURATION_S)
    """How long a tool call waits for a person before it is denied; the turn's deadline is held
    meanwhile."""
    tool_results: Literal["shared", "private"] = "shared"
    """`shared`: each posted message's tool results go, quoted after it, into the other agents'
    prompts; `private`: only the agent that called them reads them."""

    @model_validator(mode="before")
    @classmethod
    def _bounded_room(cls, data: Any, info: ValidationInfo) -> Any:
        # Before anything else walks it: a YAML alias bomb expands exponentially.
        return _bounded(data, info)

    @field_validator("agents", mode="before")
    @classmethod
    def _within_agent_bound(cls, agents: Any, info: ValidationInfo) -> Any:
        # Before the agents are validated, one by one. Only a spec checked for creating a
        # room carries the bound: a stored one is read back whatever the bound is now.
        most = (info.context or {}).get(MAX_AGENTS_CONTEXT)
        if most is not None and isinstance(agents, list | tuple):
            check_agent_count(len(agents), most)
        return agents

    @field_validator("agents")
    @classmethod
    def _enough_distinct_agents(cls, agents: list[AgentSpec], info: ValidationInfo
                                ) -> list[AgentSpec]:
        policy = info.data.get("policy")
        if isinstance(policy, RoundtablePolicy):
            # First: "no panelist" says more than "fewer than 2 agents".
            check_panel(policy.moderator, [agent.name for agent in agents], policy.rounds)
        if len(agents) < 2:
            raise ValueError(f"a room needs at least 2 agents, got {len(agents)}")
        duplicates = repeated_names([agent.name for agent in agents])
        if duplicates:
            raise ValueError(f"agent names must be unique, repeated: {', '.join(duplicates)}")
        return agents

    @field_validator("agents")
    @classmethod
    def _selector_is_not_a_participant(cls, agents: list[AgentSpec], info: ValidationInfo
                                       ) -> list[AgentSpec]:
        if isinstance(info.data.get("policy"), SelectorPolicy):
            taken = next((agent.name for agent in agents
                          if name_key(agent.name) == SELECTOR_NAME), None)
            if taken is not None:
                raise ValueError(f"{taken!r} is the selector's name in a selector room: "
                                 "name the participant otherwise")
        return agents

    @model_validator(mode="after")
    def _full_bids_use_no_tools(self) -> RoomSpec:
        # Every agent bids every turn: each would run its tools for one posted message.
        if isinstance(self.policy, BidPolicy) and self.policy.bid_mode == "full":
            named = [agent.name for agent in self.agents if agent.tools]
            if named:
                raise ValueError(f"agent {named[0]} names tools, and a bid room with "
                                 "bid_mode: full runs no tools (every agent would run its "
                                 "tools every turn): use bid_mode: intent")
        return self

    @model_validator(mode="after")
    def _acp_agents_cannot_bid(self) -> RoomSpec:
        external = next((agent for agent in self.callers if agent.is_acp), None)
        if external is not None and isinstance(self.policy, BidPolicy):
            raise ValueError(f"agent {external.name!r} ({external.model}) cannot take part in "
                             "a bid room: an ACP agent has no respond tool to bid with (use "
                             "a mention, selector or roundtable room)")
        own = next((agent for agent in self.policy.own_callers if agent.is_acp), None)
        if own is not None:
            raise ValueError(f"the policy's {own.name} cannot be an ACP agent ({own.model}): "
                             "it answers in a form only a model gives")
        return self

    @model_validator(mode="after")
    def _policy_fits_agents(self) -> RoomSpec:
        self.policy.check_agents(self.agent_names)
        return self

    @model_validator(mode="after")
    def _mention_names_known(self) -> RoomSpec:
        if isinstance(self.policy, MentionPolicy):
            check_mention_names(self.policy, self.agent_names)
        return self

    @model_validator(mode="after")
    def _approvers_are_people(self) -> RoomSpec:
        check_approvers(self.approvers, self.agent_names)
        waiting = next((agent for agent in self.agents if agent.approve), None)
        if waiting is not None and not self.approvers:
            raise ValueError(f"agent {waiting.name!r} has tools to approve "
                             f"({', '.join(waiting.approve)}) but the room has no approvers: "
                             "list the people who answer in approvers: [...]")
        return self

    @model_validator(mode="after")
    def _task_workers_are_agents(self) -> RoomSpec:
        for agent in self.agents:
            worker = agent.background.worker if agent.background else None
            if worker is not None and worker not in self.agent_names:
                raise ValueError(f"agent {agent.name!r}: background.worker {worker!r} is not "
                                 f"an agent of the room ({', '.join(self.agent_names)})")
        return self

    @model_validator(mode="after")
    def _storable(self, info: ValidationInfo) -> RoomSpec:
        if is_stored(info.context):
            return self
        try:
            check_stored_size(len(self.model_dump_json().encode()))
        except SpecTooLarge as error:
            raise PydanticCustomError("spec_too_large", str(error)) from None
        return self

    def agent(self, name: str) -> AgentSpec:
        """The agent called ``name``: a participant, or the policy's own caller (the
        selector)."""
        return next(agent for agent in self.callers if agent.name == name)

    @property
    def callers(self) -> tuple[AgentSpec, ...]:
        """Everyone a call can go to: the participants, then the policy's own callers (a
        selector, a classifier)."""
        return (*self.agents, *self.policy.own_callers)

    @property
    def agent_names(self) -> tuple[str, ...]:
        """Agent names in spec order."""
        return tuple(agent.name for agent in self.agents)


class RoomStatus(StrEnum):
    """Where a room's current run stands."""

    IDLE = "idle"  # no run in progress; waits for someone to post
    RUNNING = "running"  # a coordinator is taking turns
    FAILED = "failed"  # the run ended because the room cannot work as configured


class StopReason(StrEnum):
    """Why a run ended."""

    LULL = "lull"  # no bid cleared the threshold
    MAX_MESSAGES = "max_messages"  # the run posted max_messages, the seed included
    NO_BIDS = "no_bids"  # no agent answered before the deadline: are workers running?
    ALL_FAILED = "all_agents_failed"  # on the run's first turn every agent's call failed
    TERMINATE = "terminate"  # the selector or a participant said TERMINATE
    MAX_TURNS = "max_turns"  # the run posted its cap of participant messages
    VERDICT = "verdict"  # the round-table's moderator posted its verdict
    MODERATOR_FAILED = "moderator_failed"  # the round-table's moderator could not give one
    ROOM_ERROR = "room_error"  # every take of the room failed with an error, room_max_errors times
    CANCELLED = "cancelled"  # someone cancelled the run (parley rooms cancel, Client.cancel)
    BUDGET = "budget"  # the run's or the room's calls reached a token or cost limit (limits)
    WAITING_FOR_PERSON = "waiting_for_person"  # an agent asked a person: the room waits
    QUEUE_EMPTY = "queue_empty"  # a mention room's speak queue has nobody who can speak
    MAX_DEPTH = "max_depth"  # a mention room's chain of agent turns reached max_depth


class CallKind(StrEnum):
    """What a call asks an agent's model for."""

    BID = "bid"  # respond(score, message): does the agent want the floor, and with what
    SELECT = "select"  # the selector: who speaks next, or TERMINATE
    SPEAK = "speak"  # one participant's reply, posted as its message
    PANEL = "panel"  # a round-table panelist's turn in the debate, posted as its message
    MODERATE = "moderate"  # the round-table moderator's verdict, posted as its message
    DISPATCH = "dispatch"  # a mention room's classifier: which agents take a message
    DISCUSS = "discuss"  # a mention room's agent turn: its message, or the silent token
    INTENT = "intent"  # respond(score, intent): an intent-mode bid, one line of what it would say
    REPLY = "reply"  # the intent-mode winner's message, written from its intent
    HANDOFF = "handoff"  # a handoff room's active agent: its message, or a transfer


class AnswerStatus(StrEnum):
    """What became of one call in a turn (of any kind)."""

    OK = "ok"  # parsed into its answer (a bid's score and message); may be silent by choice
    UNPARSED = "unparsed"  # the model answered, but not in a shape its kind can read
    ERROR = "error"  # the call raised
    TIMEOUT = "timeout"  # nothing arrived before the deadline


class ErrorKind(StrEnum):
    """Why a call failed, set where it failed: by the worker for its call, by the
    coordinator for an answer that never came. Each kind has its likely fix
    (coordinator/policies/common.py)."""

    NONE = ""  # the call did not fail (or was answered before failures had kinds)
    MISSING_KEY = "missing_key"  # no API key: api_key_env's or the provider's variable is unset
    KEY_NOT_ALLOWED = "key_not_allowed"  # api_key_env is not in PARLEY_WORKER_KEY_ENVS
    API_BASE_NOT_ALLOWED = "api_base_not_allowed"  # a base that may not get a key needs one
    AUTH = "auth"  # the provider refused the key
    UNKNOWN_PROVIDER = "unknown_provider"  # the model string names no provider
    UNSUPPORTED_PARAMS = "unsupported_params"  # the provider refuses some of the parameters
    TOOLS_UNSUPPORTED = "tools_unsupported"  # the model cannot take the respond tool
    NO_TOOL_CALL = "no_tool_call"  # the model answered without the respond tool call
    UNPARSED = "unparsed"  # the model answered, but not in a shape that can be read
    NOT_FOUND = "not_found"  # the provider has no such model
    CONTEXT_WINDOW = "context_window"  # the prompt is longer than the model's window
    RATE_LIMIT = "rate_limit"  # rate-limited until the deadline, retries included
    TIMEOUT = "timeout"  # the call outlasted the agent's timeout_s or the deadline
    NO_ANSWER = "no_answer"  # no answer reached the coordinator before the deadline
    CONNECTION = "connection"  # the provider's endpoint could not be reached
    PROVIDER_ERROR = "provider_error"  # the provider failed (5xx, overloaded)
    SCRIPTED = "scripted"  # a scripted agent's entry raised its error
    CANCELLED = "cancelled"  # the turn was cut: its agent was set to only listen meanwhile
    BUDGET = "budget"  # not made: nothing was left of a spending limit (limits) for it
    TOOL_UNAVAILABLE = "tool_unavailable"  # the agent names a tool this worker does not offer
    OTHER = "other"  # anything else: the error text says what


class Message(BaseModel):
    """One entry of a room's conversation log."""

    seq: int
    sender: str
    content: str
    score: float | None = None
    turn: int | None = None
    run: int = 0
    ts: float = 0.0
    # Whom a mention room's agent message addressed (agents and people, as named); None
    # where names are not read (other policies, people's messages: see the turn record).
    addressed: list[str] | None = None
    # The tool calls the message was written from (None: it used none), and whom the
    # room's tool_results gave their results to when it was posted: every agent
    # (shared) or only its sender (private).
    tool_calls: list[ToolCallRecord] | None = None
    tool_results: Literal["shared", "private"] | None = None
    # A background task's result posted as the agent's message: the task, and the agent
    # that worked it.
    task_id: str | None = None
    worker: str | None = None

    def shows_tool_results(self, reader: str) -> bool:
        """True when ``reader``'s prompts read this message's tool results."""
        return bool(self.tool_calls) and (self.tool_results == "shared"
                                           or self.sender == reader)


class PostedMessage(BaseModel):
    """A message a turn's policy read as posted by someone other than the room's agents."""

    seq: int
    sender: str
    content: str


class FloorChange(BaseModel):
    """An operator's change of a mention room's floor, as a turn's policy applied it."""

    id: str
    op: str
    agent: str = ""
    text: str = ""


class ToolCallStatus(StrEnum):
    """What became of one tool call of a call's tool loop."""

    OK = "ok"  # the tool ran and returned its result
    ERROR = "error"  # the tool raised (or is unknown): the model was told the error
    TIMEOUT = "timeout"  # the tool outlasted its timeout_s or the call's deadline
    DENIED = "denied"  # a person denied it, or nobody answered its approval in time
    UNCERTAIN = "uncertain"  # it started on a worker that stopped: its result is unknown


class ToolCallRecord(BaseModel):
    """One tool call, as the turn record, the events and the room's tool journal tell it."""

    id: str  # room, turn, phase, call, round and index: the same when the call is asked again
    agent: str
    tool: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    status: ToolCallStatus = ToolCallStatus.OK
    result: str = ""  # an excerpt, at most 2 KB
    duration_ms: float = 0.0
    round: int = 0
    index: int = 0
    approved_by: str = ""
    replayed: bool = False  # read back from the journal, not run by this call


class PolicyCall(BaseModel):
    """A call of one of the policy's own tools (a handoff's ``transfer_to_<agent>``): it
    is not run, it ends the call, and the policy decides what it does."""

    name: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class Answer(BaseModel):
    """What one call returned (or that it returned nothing), of every kind: an agent's bid,
    the selector's pick, a participant's reply, a classifier's judgment, by ``kind``. Kept
    in the room's answers stream (its key and fields keep their first name, ``bids``)."""

    agent: str
    turn: int
    kind: CallKind = CallKind.BID
    phase: int = 0  # the turn's phase the call belongs to (0 first)
    call: int = 0  # the agent's call number in the room (1 first), for scripted replay
    score: float = 0.0
    message: str = ""
    status: AnswerStatus = AnswerStatus.OK
    error: str = ""
    error_kind: ErrorKind = ErrorKind.NONE
    # The key variable a failure names, set where it failed: the agent's api_key_env (unset
    # on the worker, or not lent), or the provider's variable its refusal asked for.
    error_variable: str = ""
    attempt: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those the provider read from its prompt cache
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    dropped_messages: int = 0
    # The worker's id for this answer ("" where none was given): a write repeated after a
    # lost reply is recognised by it, and neither kept nor counted twice.
    answer_id: str = ""
    # The tool calls the call's model made before its answer, in order.
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    # The policy's tool the call ended with, if any (its message is the text beside it).
    policy_call: PolicyCall | None = None

    @property
    def failed(self) -> bool:
        """True when the call could not answer at all (as opposed to choosing silence)."""
        return self.status in (AnswerStatus.ERROR, AnswerStatus.UNPARSED)


class TurnRecord(BaseModel):
    """Everything a turn was decided from, and what was decided: enough to replay it."""

    turn: int
    run: int
    run_turns: int
    epoch: int
    snapshot_seq: int
    messages_in_run: int
    recent: list[str]
    policy_state: dict[str, str] = Field(default_factory=dict)
    floor_state: dict[str, str] = Field(default_factory=dict)  # room-scoped policy fields
    unread: list[PostedMessage] = Field(default_factory=list)  # posts the policy read
    ops: list[FloorChange] = Field(default_factory=list)  # floor changes it applied
    # Whom each message the turn read or posted addressed, by seq ("posted": the turn's own
    # message, whose seq is given at commit): a mention room's only.
    addressed: dict[str, list[str]] = Field(default_factory=dict)
    bids: list[Answer]
    # Answers that reached Redis while the turn was played and took no part in its
    # decision: this turn's after their phase's deadline, earlier turns' that came after
    # theirs was decided or abandoned, a call's second answer. Each counted in the room's
    # totals as it landed, and in this turn's below.
    late: list[Answer] = Field(default_factory=list)
    adjusted: dict[str, float] = Field(default_factory=dict)
    winner: str | None = None
    score: float | None = None
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    # The background task whose result the turn relayed ("" for a policy's turn): the
    # coordinator gave the winner this turn at a turn boundary, the policy was not asked.
    relay: str = ""
    # agent -> the participant's name its reply was cut at (the bids above are uncut)
    cuts: dict[str, str] = Field(default_factory=dict)
    opened_at: float = 0.0
    deadline: float = 0.0
    decided_at: float = 0.0
    # The OpenTelemetry trace of the turn's run (32 hex digits; "" with tracing off).
    trace_id: str = ""

    # The turn's totals over its answers, late ones included, derived from them so they
    # always agree with them.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of every answer in the turn."""
        return sum(bid.prompt_tokens for bid in self.paid)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completion_tokens(self) -> int:
        """Completion tokens of every answer in the turn."""
        return sum(bid.completion_tokens for bid in self.paid)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cached_tokens(self) -> int:
        """Prompt tokens of the turn's answers that providers read from their prompt cache."""
        return sum(bid.cached_tokens for bid in self.paid)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_usd(self) -> float:
        """What the turn's answers cost, in US dollars."""
        return sum(bid.cost_usd for bid in self.paid)

    @property
    def paid(self) -> list[Answer]:
        """Every answer the record holds: the decided ones, then the late."""
        return [*self.bids, *self.late]


class CallRequest(BaseModel):
    """One Celery task's payload: a chunk of calls of one kind, on the same snapshot."""

    prefix: str
    room: str
    turn: int
    attempt: int
    agents: list[str]
    kind: CallKind = CallKind.BID
    phase: int = 0
    calls: dict[str, int] = Field(default_factory=dict)  # agent -> its call number
    # agent -> the input its turn takes: a mention room's operator instruction, or the
    # intent an intent-mode winner announced
    instructions: dict[str, str] = Field(default_factory=dict)
    snapshot_seq: int
    deadline: float
    spec_version: int
    # What is left of the room's and run's spending limits as the calls go out (None: no
    # such limit): each call's output is capped by it (max_tokens; a cost estimated at
    # the model's output price, where the worker knows it).
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    # The W3C traceparent of the turn's publish span ("" with tracing off): per request,
    # since one task message may carry the calls of several rooms, each its own trace.
    traceparent: str = ""
    # The room's organization: its own provider keys, where a worker has them, and its
    # daily totals.
    organization: str = DEFAULT_ORGANIZATION
    # The room's count of background tasks ever started, as its state had it when the
    # calls went out: a room that never had one reads no tasks for its notes (None: a
    # coordinator that does not say, so the worker reads them).
    tasks_started: int | None = None
    # A turn taken over from a coordinator that died: its answers stream id the turn's
    # answers start after. The dead one's calls may still be queued or running; a worker
    # asks no agent whose answer of this phase is there by the time it takes the call.
    answers_from: str = ""
