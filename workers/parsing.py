"""Turn whatever a provider returned for the forced ``respond`` call into (score, message).

Providers and client libraries hand the same decision back in many shapes: a completion
with tool calls, one tool call, a list of them, a dict, a JSON string, a Python repr, a
pydantic object. ``parse_respond`` accepts them all and never raises: anything it cannot
read becomes the silent bid (0.0, "") with the reason kept for operators.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

import orjson

RESPOND = "respond"
_MAX_DEPTH = 12


@dataclass(frozen=True)
class ParsedBid:
    """A clean decision; ``error`` says why a bid had to be read as silent."""

    score: float = 0.0
    message: str = ""
    error: str = ""


class Unparseable(ValueError):
    """The output holds no usable respond decision."""


def parse_respond(raw: Any) -> ParsedBid:
    """The (score, message) in ``raw``, clamped and stripped; silent with a reason if none."""
    try:
        score, message = _decision(raw, _MAX_DEPTH)
    except Unparseable as error:
        return ParsedBid(error=f"unparsed: {error}")
    return ParsedBid(score=score, message=message)


def _decision(raw: Any, depth: int) -> tuple[float, str]:
    if depth <= 0:
        raise Unparseable("output nested too deeply")
    raw = _plain(raw)
    if isinstance(raw, str):
        return _decision(_load_text(raw), depth - 1)
    if isinstance(raw, list):
        return _decision(_pick_call(raw), depth - 1)
    if not isinstance(raw, dict):
        raise Unparseable(f"unexpected output type {type(raw).__name__}")
    if "choices" in raw:
        return _decision(_first_message(raw), depth - 1)
    if "tool_calls" in raw or ("content" in raw and "score" not in raw):
        calls = raw.get("tool_calls")
        if not calls:
            raise Unparseable("no respond tool call in the reply")
        return _decision(calls, depth - 1)
    if "function" in raw:
        return _decision(raw["function"], depth - 1)
    if "arguments" in raw:
        return _decision(raw["arguments"], depth - 1)
    if "score" in raw or "message" in raw:
        return _score(raw.get("score")), _message(raw.get("message"))
    raise Unparseable("no score or message in the output")


def _plain(raw: Any) -> Any:
    """Objects with ``model_dump`` (pydantic, litellm responses) or ``__dict__`` as dicts."""
    if hasattr(raw, "model_dump"):
        return raw.model_dump()
    if hasattr(raw, "__dict__") and not isinstance(raw, type):
        return dict(vars(raw))
    return raw


def _load_text(text: str) -> Any:
    text = text.strip()
    if not text:
        raise Unparseable("empty output")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as error:
        raise Unparseable(f"not JSON or a Python literal: {text[:80]!r}") from error


def _first_message(response: dict[str, Any]) -> Any:
    choices = response.get("choices") or []
    if not choices:
        raise Unparseable("the completion has no choices")
    choice = _plain(choices[0])
    return _plain(choice.get("message") if isinstance(choice, dict) else None) or {}


def _pick_call(calls: list[Any]) -> Any:
    """The respond call among several (the first call when none is named respond)."""
    if not calls:
        raise Unparseable("empty list of tool calls")
    for call in calls:
        call = _plain(call)
        function = _plain(call.get("function")) if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name") == RESPOND:
            return call
    return calls[0]


def _score(value: Any) -> float:
    if isinstance(value, bool):
        raise Unparseable(f"score must be a number, got {value!r}")
    if value is None:
        return 0.0
    try:
        score = float(value)
    except (TypeError, ValueError) as error:
        raise Unparseable(f"score must be a number, got {value!r}") from error
    if math.isnan(score):
        raise Unparseable("score is NaN")
    return min(1.0, max(0.0, score))


def _message(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise Unparseable(f"message must be text, got {type(value).__name__}")
