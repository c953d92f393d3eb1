"""The ``chat <model>`` span of a model call, with the OpenTelemetry GenAI semantic
conventions' attributes (gen_ai.*): what was asked of which provider, what answered, the
tokens it used and why it stopped. Prompts and replies only with ``PARLEY_TRACE_CONTENT``."""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any

import orjson

from parley.shared import tracing
from parley.shared.models import AgentSpec


def chat_span(agent: AgentSpec, messages: list[Any]) -> AbstractContextManager[Any]:
    """The span of one model call of ``agent`` (a no-op while tracing is off)."""
    if not tracing.on():
        return tracing.span("")
    named = agent.litellm_kwargs.get("custom_llm_provider")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider_name(agent.model, agent.api_base,
                                              named if isinstance(named, str) else None),
        "gen_ai.request.model": agent.model,
        "gen_ai.agent.name": agent.name,
        "gen_ai.request.temperature": agent.temperature,
        "gen_ai.request.max_tokens": agent.max_tokens,
    }
    if tracing.records_content():
        attributes["gen_ai.input.messages"] = orjson.dumps(messages, default=str).decode()
    return tracing.span(f"chat {agent.model}", attributes, kind="client")


@lru_cache(maxsize=1024)
def provider_name(model: str, api_base: str | None, named: str | None) -> str:
    """litellm's name of the model's provider (``openai``, ``anthropic``...)."""
    import litellm  # loaded by workers.llm first, after its cost-map setup

    try:
        return litellm.get_llm_provider(model=model, api_base=api_base,
                                        custom_llm_provider=named)[1]
    except Exception:  # noqa: BLE001 - an unknown provider fails the call itself, not its span
        return "unknown"


def describe_response(current: Any, response: Any) -> None:
    """Add what the model answered to its span: response model and id, tokens, finish
    reasons (and the reply with PARLEY_TRACE_CONTENT)."""
    if current is None:
        return
    usage = getattr(response, "usage", None)
    choices = getattr(response, "choices", None) or []
    attributes: dict[str, Any] = {
        "gen_ai.response.model": getattr(response, "model", None),
        "gen_ai.response.id": getattr(response, "id", None),
        "gen_ai.usage.input_tokens": getattr(usage, "prompt_tokens", None),
        "gen_ai.usage.output_tokens": getattr(usage, "completion_tokens", None),
        "gen_ai.response.finish_reasons": [str(choice.finish_reason) for choice in choices
                                           if getattr(choice, "finish_reason", None)],
    }
    if tracing.records_content():
        replies: list[Any] = [getattr(choice, "message", None) for choice in choices]
        attributes["gen_ai.output.messages"] = orjson.dumps(
            [reply.model_dump() if hasattr(reply, "model_dump") else str(reply)
             for reply in replies], default=str).decode()
    tracing.annotate(current, attributes)
