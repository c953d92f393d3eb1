"""One agent's model call, of any kind, through litellm: the only module that imports it.

The call forces its kind's tool (a bid's respond tool), fits the transcript into the
model's context budget, reads the agent's key from the environment at call time (and sends
it only where workers/credentials.py allows), bounds every attempt by the turn's deadline
(retrying a provider's rate limit with backoff while the deadline allows), accounts for
tokens and cost, and tells what kind of failure a failed call met (``classify_error``).
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import structlog

from parley.shared.litellm_env import use_local_cost_map
from parley.shared.logs import route_to_root
from parley.shared.models import DEFAULT_ORGANIZATION, AgentSpec, CallKind, ErrorKind, Message
from parley.shared.settings import Settings
from parley.workers import http_pool
from parley.workers.credentials import (
    NO_KEY,
    ApiBaseNotAllowed,
    Credential,
    KeyEnvNotAllowed,
    MissingApiKey,
    credential_for,
    withheld_refusal,
)
from parley.workers.deadlines import STOPPING, DeadlinePassed, pause, until_deadline
from parley.workers.model_spans import chat_span, describe_response
from parley.workers.prompts import (
    CALL_PROMPTS,
    FORCE_RESPOND,
    ChatMessage,
    input_budget,
    with_cache_breakpoint,
)

use_local_cost_map()  # read by litellm as it loads, just below
import litellm  # noqa: E402
from litellm.llms.custom_httpx.http_handler import get_ssl_configuration  # noqa: E402

# Keep litellm's help banners out of worker logs: every failure is logged once, by us.
litellm.suppress_debug_info = True
# litellm's loggers come with plain-text handlers of their own: its lines go through
# parley's handler instead (JSON in JSON mode), its secret redaction kept.
route_to_root("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
# Count tokens with the bundled tiktoken encoding for every model: otherwise litellm fetches
# some models' tokenizers (Llama, ...) from the Hugging Face hub on first use, inside a bid's
# deadline (23 s of retries here, offline). The context budget's margin absorbs the
# difference.
litellm.disable_hf_tokenizer_download = True


# Every OpenAI-compatible call goes through the worker's own client (workers/http_pool.py),
# with litellm's TLS settings.
litellm.client_session = http_pool.provider_client(get_ssl_configuration())

log = structlog.get_logger("parley.worker")

# No call starts with less time than this before the deadline: it could not finish.
MIN_CALL_S = 0.05
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 8.0
# Providers whose only credential is the api_key argument: at a base that may not receive a
# key they get NO_KEY and read no variable (each checked against the local stub in
# tests/integration/test_key_exfiltration.py). The others sign requests with the worker's
# cloud credentials (AWS, Google, Azure AD ...) whatever api_key says, so they are called
# only at their default endpoint or an allowed base.
KEYLESS_PROVIDERS = frozenset({
    "openai", "custom_openai", "hosted_vllm",
    "ollama", "ollama_chat", "lm_studio", "llamafile", "xinference", "litellm_proxy",
})
# What a provider answers when it wants a key the call did not carry.
REFUSALS = (litellm.AuthenticationError, litellm.PermissionDeniedError)


# Providers that cache a prompt's prefix only where the request marks it (cache_control);
# OpenAI, DeepSeek and others cache prefixes on their own. Claude on Bedrock and Vertex too.
CACHE_HINT_PROVIDERS = frozenset({"anthropic"})
CACHE_HINT_CLAUDE_PROVIDERS = frozenset({"bedrock", "bedrock_converse", "vertex_ai",
                                         "vertex_ai_beta"})


def call_model(agent: AgentSpec, room_agents: list[AgentSpec], transcript: list[Message],
               deadline: float, kind: CallKind = CallKind.BID,
               on_text: Callable[[str], None] | None = None, instruction: str = "", *,
               settings: Settings, left: tuple[int | None, float | None] = (None, None),
               tools: list[dict[str, Any]] | None = None, tool_choice: str = "auto",
               conversation: Sequence[ChatMessage] = (),
               organization: str = DEFAULT_ORGANIZATION) -> tuple[Any, dict[str, Any]]:
    """Ask the agent's model for a ``kind`` answer on ``transcript``, with the prompt and
    forced tool of that kind (workers.prompts.CALL_PROMPTS): its respond decision (bid,
    intent), a name (select), its message (speak, reply: written from ``instruction``, its
    intent), its turn in a round-table (panel) or the verdict (moderate). The worker's
    ``settings`` say which keys it lends, and where.

    With ``on_text``, a call whose answer is posted streams: each piece of text goes to
    ``on_text`` as the model writes it. ``left`` is what is left of the room's spending
    limits (tokens, US dollars; None: no such limit): the reply is capped by it
    (output_cap), and a call whose cap is nothing is not made (BudgetSpent).

    A step of a tool loop offers the agent's ``tools`` (OpenAI's format) with
    ``tool_choice`` (``auto``; ``none`` for the loop's last, text-only step) and reads the
    tool ``conversation`` so far after the prompt; only a step with ``tool_choice`` none
    streams.

    Returns the provider's raw response and the answer's usage fields (prompt_tokens,
    completion_tokens, cached_tokens, cost_usd, dropped_messages). Raises whatever the call
    raised, midway through a stream too.
    """
    credential = credential_for(agent, settings, organization)
    if credential.withheld:
        check_keyless_provider(agent)
    named = agent.litellm_kwargs.get("custom_llm_provider")
    map_model(agent.model, agent.api_base, named if isinstance(named, str) else None)
    cap = output_cap(agent, *left)
    budget = input_budget(context_window(agent), agent.max_tokens)
    call = CALL_PROMPTS[kind]
    forced = call.forces is not None
    prompt = call.prompt(agent, room_agents, transcript, budget,
                         token_counter(agent.model, forced), instruction)
    messages = with_cache_breakpoint(prompt.messages) if needs_cache_hint(agent) else prompt.messages
    messages = [*messages, *conversation]
    request = request_kwargs(agent, messages, credential.api_key, forced, call.forces, cap)
    if tools:
        request.update(tools=tools, tool_choice=tool_choice)
    streams = on_text is not None and call.streams and (not tools or tool_choice == "none")
    if streams:
        request.update(stream=True, stream_options={"include_usage": True})
    with chat_span(agent, messages) as current:
        response = complete_with(agent, credential, request, deadline)
        if streams:
            assert on_text is not None
            response = read_stream(response, messages, on_text, deadline)
        describe_response(current, response)
    usage = {**response_usage(agent, response), "dropped_messages": prompt.dropped}
    return response, usage


def read_stream(stream: Any, messages: list[ChatMessage], on_text: Callable[[str], None],
                deadline: float) -> Any:
    """Hand on each piece of a streamed reply's text; the whole response, rebuilt from its
    chunks (with the usage the last one carries). The deadline bounds the whole stream: a
    provider that stalls mid-reply is given up on there, not at its read timeout."""
    chunks = []
    for chunk in until_deadline(stream, deadline):
        chunks.append(chunk)
        choices = getattr(chunk, "choices", None) or []
        delta = getattr(choices[0], "delta", None) if choices else None
        text = getattr(delta, "content", None) if delta is not None else None
        if text:
            on_text(text)
    if not chunks:
        raise litellm.APIConnectionError(message="the stream ended before any chunk",
                                         llm_provider="", model="")
    return litellm.stream_chunk_builder(chunks, messages=messages)


def needs_cache_hint(agent: AgentSpec) -> bool:
    """True when the agent's provider caches a prompt prefix only where it is marked."""
    named = agent.litellm_kwargs.get("custom_llm_provider")
    return provider_needs_cache_hint(agent.model, agent.api_base,
                                     named if isinstance(named, str) else None)


@lru_cache(maxsize=1024)
def provider_needs_cache_hint(model: str, api_base: str | None, named: str | None) -> bool:
    """needs_cache_hint for one model, base and named provider: worked out once, not on
    every call."""
    try:
        model, provider, _, _ = litellm.get_llm_provider(
            model=model, api_base=api_base, custom_llm_provider=named)
    except Exception:  # noqa: BLE001 - the call itself says what is wrong with the model
        return False
    return provider in CACHE_HINT_PROVIDERS or (
        provider in CACHE_HINT_CLAUDE_PROVIDERS and "claude" in model.lower())


def check_keyless_provider(agent: AgentSpec) -> None:
    """Raise ApiBaseNotAllowed unless the agent's provider can be called at its (not allowed)
    api_base without reading any of the worker's credentials."""
    named = agent.litellm_kwargs.get("custom_llm_provider")
    try:
        _, provider, dynamic_key, _ = litellm.get_llm_provider(
            model=agent.model, api_base=agent.api_base, api_key=NO_KEY,
            custom_llm_provider=named if isinstance(named, str) else None)
    except Exception:  # noqa: BLE001 - the call raises the same error, with its usual hint
        return
    if provider not in KEYLESS_PROVIDERS:
        raise withheld_refusal(agent, f"may not receive a key, and provider {provider} "
                                      "authenticates with the worker's own credentials")
    if dynamic_key not in (None, NO_KEY):
        raise withheld_refusal(agent, f"may not receive a key, and provider {provider} "
                                      "would read one from the environment")


class BudgetSpent(RuntimeError):
    """What is left of the room's spending limits buys no output token: the call is not
    made."""


def output_cap(agent: AgentSpec, tokens_left: int | None, dollars_left: float | None
               ) -> int | None:
    """The reply's max_tokens: the agent's own, lowered to the tokens left of the room's
    limits and to the output tokens the dollars left buy at the model's output price (the
    agent's own output_cost_per_token, else litellm's; none known: no such cap). None when
    nothing caps it. The prompt's own tokens and cost are not taken off: the estimate
    bounds the reply, the limits' check before each turn bounds the rest.

    Raises BudgetSpent when the cap would be 0."""
    cap = agent.max_tokens
    if tokens_left is not None:
        if tokens_left < 1:
            raise BudgetSpent("not made: no token is left of the token limits")
        cap = min(cap or tokens_left, tokens_left)
    price = output_price(agent) if dollars_left is not None else None
    if dollars_left is not None and price:
        # Rounded first: $0.06 at $0.001 a token is 60 tokens, not the 59.99... floats make.
        bought = math.floor(round(dollars_left / price, 6))
        if bought < 1:
            raise BudgetSpent(f"not made: the ${dollars_left:.6g} left of the cost limits "
                              f"buys no output token at ${price:.6g} a token")
        cap = min(cap or bought, bought)
    return cap


def output_price(agent: AgentSpec) -> float | None:
    """US dollars per output token: the agent's own price, else litellm's for the model;
    None when neither is known."""
    own = agent.litellm_kwargs.get("output_cost_per_token")
    if isinstance(own, int | float) and not isinstance(own, bool):
        return float(own)
    return model_output_price(agent.model)


@lru_cache(maxsize=1024)
def model_output_price(model: str) -> float | None:
    """litellm's output price of the model, or None when its map has none."""
    try:
        price = litellm.get_model_info(model).get("output_cost_per_token")
    except Exception:  # noqa: BLE001 - litellm raises several types for unmapped models
        return None
    return float(price) if price else None


def complete_with(agent: AgentSpec, credential: Credential, request: dict[str, Any],
                  deadline: float) -> Any:
    """The call; a refusal of a call that went without a key names the setting to change."""
    try:
        return complete_until(agent, request, deadline)
    except REFUSALS as error:
        if not credential.withheld:
            raise
        status = getattr(error, "status_code", "") or type(error).__name__
        raise withheld_refusal(agent, f"refused the call without a key ({status})") from None


def request_kwargs(agent: AgentSpec, messages: list[ChatMessage], api_key: str | None,
                   force_respond: bool = True, force: dict[str, Any] | None = None,
                   max_tokens: int | None = None) -> dict[str, Any]:
    """litellm.completion's arguments, except the per-attempt timeout; ``force`` the tool
    to force when not the respond tool, ``max_tokens`` the reply's cap when not the
    agent's own."""
    request: dict[str, Any] = {
        **agent.litellm_kwargs,
        "model": agent.model,
        "messages": messages,
        **((force or FORCE_RESPOND) if force_respond else {}),
        # Retries are ours, bounded by the turn's deadline; the client must not add its own.
        "num_retries": 0,
    }
    optional = {"temperature": agent.temperature, "max_tokens": max_tokens or agent.max_tokens,
                "api_base": agent.api_base, "api_key": api_key}
    request.update({name: value for name, value in optional.items() if value is not None})
    return request


def complete_until(agent: AgentSpec, request: dict[str, Any], deadline: float) -> Any:
    """Call litellm; on a rate limit, back off and retry while the deadline allows (and
    the worker is not shutting down)."""
    attempt = 0
    while True:
        timeout = attempt_timeout(agent, deadline)
        try:
            return litellm.completion(**request, timeout=timeout)
        except litellm.RateLimitError as error:
            wait = backoff_s(attempt, retry_after_s(error))
            if time.time() + wait + MIN_CALL_S >= deadline or STOPPING.is_set():
                raise
            log.info("rate_limited_retry", agent=agent.name, attempt=attempt + 1,
                     wait_s=round(wait, 3))
            pause(wait, deadline, "the rate limit's backoff")
            if STOPPING.is_set():
                raise
            attempt += 1


def attempt_timeout(agent: AgentSpec, deadline: float) -> float:
    """Seconds this attempt may take: the agent's timeout, cut to the time left rounded up
    to a whole second. litellm keeps one HTTP client (and its open connections) per
    timeout value: a timeout that changed with every call cost every call a new connection
    (a TLS handshake at a real provider); an answer past the deadline is ignored anyway."""
    left = deadline - time.time()
    if left < MIN_CALL_S:
        raise DeadlinePassed(f"only {max(left, 0.0):.3f}s left before the bid deadline")
    return float(min(agent.timeout_s or math.ceil(left), math.ceil(left)))


def backoff_s(attempt: int, retry_after: float | None = None) -> float:
    """Exponential backoff with jitter, never sooner than the provider's Retry-After."""
    exponential = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** attempt)
    jittered = exponential * random.uniform(0.5, 1.0)
    return max(jittered, retry_after or 0.0)


def retry_after_s(error: Exception) -> float | None:
    """The Retry-After seconds a rate-limit response carried, if any."""
    headers = getattr(error, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(error, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None  # an HTTP date or garbage: fall back to our own backoff


def response_usage(agent: AgentSpec, response: Any) -> dict[str, Any]:
    """Tokens the provider reported and the call's cost (zero where litellm has no price)."""
    usage = getattr(response, "usage", None)
    return {
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "cached_tokens": cached_tokens(usage),
        "cost_usd": call_cost(agent, response),
    }


def cached_tokens(usage: Any) -> int:
    """The prompt tokens the provider read from its prompt cache (litellm reports them as
    OpenAI does, in prompt_tokens_details, whatever the provider)."""
    details = getattr(usage, "prompt_tokens_details", None)
    if isinstance(details, dict):
        return int(details.get("cached_tokens") or 0)
    return int(getattr(details, "cached_tokens", 0) or 0)


def call_cost(agent: AgentSpec, response: Any) -> float:
    """litellm's price of the call; zero for models it has no price for (local, stubs).

    litellm prices every answered call as it returns it, with the call's own custom prices,
    and keeps the figure in the response (``response_cost``, None where it has no price):
    pricing it again cost a quarter of a millisecond of CPU per call. A streamed reply,
    rebuilt from its chunks, carries no price and is priced here."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        return float(hidden["response_cost"] or 0.0)
    custom = {name: float(price) for name in ("input_cost_per_token", "output_cost_per_token")
              if isinstance(price := agent.litellm_kwargs.get(name), int | float)}
    try:
        cost = litellm.completion_cost(completion_response=response,
                                       custom_cost_per_token=custom or None)
    except Exception:  # noqa: BLE001 - unknown models have no price: that is not a failure
        return 0.0
    return float(cost or 0.0)


def context_window(agent: AgentSpec) -> int | None:
    """The agent's own max_context_tokens, else litellm's figure for the model, else None."""
    return agent.max_context_tokens or model_context_window(agent.model)


@lru_cache(maxsize=1024)
def model_context_window(model: str) -> int | None:
    """Input tokens litellm's model map gives the model, or None when it does not know it."""
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises several types for unmapped models
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


@lru_cache(maxsize=1024)
def map_model(model: str, api_base: str | None, named: str | None) -> None:
    """Enter a model litellm's model map does not know (a local or self-hosted one) into
    it, without a price or a window, once per worker.

    litellm looks a call's model up about ten times per call (its parameters, its price,
    its cost checks), and caches only the lookups that succeed: an unmapped model's ran
    litellm's whole fallback search every time: a fifth of a call's CPU. An entry
    without prices still prices the call at zero, and custom prices still apply."""
    try:
        litellm.get_model_info(model)
        return
    except Exception:  # noqa: BLE001 - litellm raises several types for unmapped models
        pass
    try:
        _, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base,
                                                     custom_llm_provider=named)
    except Exception:  # noqa: BLE001 - the call itself says what is wrong with the model
        return
    litellm.register_model({model: {"litellm_provider": provider, "mode": "chat"}})


@lru_cache(maxsize=1024)
def token_counter(model: str, with_respond_tool: bool = True):  # noqa: ANN201 - a TokenCounter
    """Count chat messages as litellm does for ``model``, the respond tool included when
    the call sends it; one counter per model, so the prompts' kept counts are found again."""
    tool_tokens = respond_tool_tokens(model) if with_respond_tool else 0

    def count(messages: list[ChatMessage]) -> int:
        return litellm.token_counter(model=model, messages=messages) + tool_tokens

    return count


@lru_cache(maxsize=1024)
def respond_tool_tokens(model: str) -> int:
    """What the respond tool and tool_choice add to a request's count: counted once per
    model, since trimming counts many single messages."""
    with_tool = litellm.token_counter(model=model, messages=[], **FORCE_RESPOND)
    return with_tool - litellm.token_counter(model=model, messages=[])


# parley's own refusals, known by their class alone.
OWN_FAILURES: tuple[tuple[type[Exception], ErrorKind], ...] = (
    (MissingApiKey, ErrorKind.MISSING_KEY),
    (KeyEnvNotAllowed, ErrorKind.KEY_NOT_ALLOWED),
    (ApiBaseNotAllowed, ErrorKind.API_BASE_NOT_ALLOWED),
    (DeadlinePassed, ErrorKind.TIMEOUT),
    (BudgetSpent, ErrorKind.BUDGET),
)
# What litellm's message says where its class does not tell, first match first: a missing
# key arrives as AuthenticationError, InternalServerError or APIConnectionError depending on
# the provider, a refused connection as InternalServerError, an unknown provider as a bare
# BadRequestError, a model without tools as UnsupportedParamsError or a provider's 400.
FAILURE_MESSAGES: tuple[tuple[re.Pattern[str], ErrorKind], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), kind) for pattern, kind in (
        (r"missing\b.{0,40}\b(api[ _-]?key|credentials|auth[ _]token)"
         r"|api_key client option must be set|no api key (was )?(provided|found|set)",
         ErrorKind.MISSING_KEY),
        (r"incorrect api key|invalid (x-)?api[ _-]?key", ErrorKind.AUTH),
        (r"LLM Provider NOT provided", ErrorKind.UNKNOWN_PROVIDER),
        (r"does not support parameters: \[[^\]]*'(tools|tool_choice|functions)'"
         r"|tools? (is|are) not supported|does not support (tools|function)|function calling",
         ErrorKind.TOOLS_UNSUPPORTED),
        (r"context length|context window|prompt is too long", ErrorKind.CONTEXT_WINDOW),
        (r"model_not_found|not_found_error|model not found|model\b.{0,80}\bdoes not exist",
         ErrorKind.NOT_FOUND),
        (r"rate limit", ErrorKind.RATE_LIMIT),
        (r"timed out", ErrorKind.TIMEOUT),
        (r"connection error|connection refused|name or service not known|failed to resolve",
         ErrorKind.CONNECTION),
        (r"overloaded", ErrorKind.PROVIDER_ERROR),
    ))
# litellm's exception classes, each before its bases (several are BadRequestErrors).
FAILURE_CLASSES: tuple[tuple[type[Exception], ErrorKind], ...] = (
    (litellm.Timeout, ErrorKind.TIMEOUT),
    (litellm.RateLimitError, ErrorKind.RATE_LIMIT),
    (litellm.ContextWindowExceededError, ErrorKind.CONTEXT_WINDOW),
    (litellm.UnsupportedParamsError, ErrorKind.UNSUPPORTED_PARAMS),
    (litellm.AuthenticationError, ErrorKind.AUTH),
    (litellm.PermissionDeniedError, ErrorKind.AUTH),
    (litellm.NotFoundError, ErrorKind.NOT_FOUND),
    (litellm.APIConnectionError, ErrorKind.CONNECTION),
    (litellm.InternalServerError, ErrorKind.PROVIDER_ERROR),
    (litellm.ServiceUnavailableError, ErrorKind.PROVIDER_ERROR),
    (litellm.BadGatewayError, ErrorKind.PROVIDER_ERROR),
    (TimeoutError, ErrorKind.TIMEOUT),
)


# The key variable a provider's refusal asks for ("... set the `OPENAI_API_KEY` environment
# variable"): litellm says it only in its message's text.
_KEY_VARIABLE = re.compile(r"\b([A-Z][A-Z0-9_]*_(?:API_KEY|AUTH_TOKEN))\b")


def provider_key_variable(error: Exception) -> str:
    """The key variable a provider's (or litellm's) refusal names, or "" when none."""
    found = _KEY_VARIABLE.search(str(error))
    return found.group(1) if found else ""


def classify_error(error: Exception) -> ErrorKind:
    """The kind of failure a model call raised: parley's own refusals by class, then what
    litellm's message names, then litellm's class; ``other`` when none tells."""
    for own, kind in OWN_FAILURES:
        if isinstance(error, own):
            return kind
    message = str(error)
    for pattern, kind in FAILURE_MESSAGES:
        if pattern.search(message):
            return kind
    return next((kind for cls, kind in FAILURE_CLASSES if isinstance(error, cls)), ErrorKind.OTHER)
