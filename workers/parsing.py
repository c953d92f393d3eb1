"""Turn whatever a provider returned for the forced ``respond`` call into (score, message).

Providers and client libraries hand the same decision back in many shapes: a completion
with tool calls, one tool call, a list of them, a dict, a JSON string, a Python repr (of
plain data or of client objects), a pydantic object, a score given as a string, a field
left out. ``parse_respond`` accepts them all and never raises: anything it cannot read
becomes the silent bid (0.0, "") with the reason kept for operators, and its kind:
``no_tool_call`` for a reply without the respond call, ``unparsed`` for anything else.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from parley.shared.models import ErrorKind
from parley.shared.protocol import INTENT_FIELD, RESPOND

_MAX_DEPTH = 12
_SNIPPET_CHARS = 80
# The keys that carry a call's arguments: OpenAI ``arguments``, Gemini ``args``,
# Anthropic ``input`` (on a tool_use block).
_ARGUMENT_KEYS = ("arguments", "args", "input")


@dataclass(frozen=True)
class ParsedBid:
    """A clean decision; ``error`` says why a bid had to be read as silent, and
    ``error_kind`` what kind of failure that was."""

    score: float = 0.0
    message: str = ""
    error: str = ""
    error_kind: ErrorKind = ErrorKind.NONE


class Unparseable(ValueError):
    """The output holds no usable respond decision."""

    kind: ClassVar[ErrorKind] = ErrorKind.UNPARSED


class NoToolCall(Unparseable):
    """The reply is a chat message without the respond tool call (often plain prose: the
    model cannot call tools)."""

    kind: ClassVar[ErrorKind] = ErrorKind.NO_TOOL_CALL


def unparsed(error: Unparseable) -> ParsedBid:
    """The silent answer for output that could not be read, with the reason and its kind."""
    return ParsedBid(error=f"unparsed: {error}", error_kind=error.kind)


def parse_respond(raw: Any) -> ParsedBid:
    """The (score, message) in ``raw``, clamped and stripped; silent with a reason if none."""
    try:
        score, message = _decision(raw, _MAX_DEPTH)
    except Unparseable as error:
        return unparsed(error)
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
    if _is_chat_message(raw):
        return _decision(_calls_of(raw), depth - 1)
    if raw.get("function"):
        return _decision(raw["function"], depth - 1)
    for key in _ARGUMENT_KEYS:
        if key in raw:
            return _decision(raw[key], depth - 1)
    if "score" in raw or "message" in raw or INTENT_FIELD in raw:
        # An intent-mode bid names its line ``intent``: read as the bid's message.
        return _score(raw.get("score")), _message(raw.get("message", raw.get(INTENT_FIELD)))
    raise Unparseable("no score or message in the output")


def _is_chat_message(raw: dict[str, Any]) -> bool:
    """An assistant message (tool calls and/or content), as opposed to a decision."""
    if "tool_calls" in raw or "function_call" in raw:
        return True
    return "content" in raw and "score" not in raw and "message" not in raw


def _calls_of(message: dict[str, Any]) -> list[Any]:
    """The message's tool calls (or legacy function call); Unparseable when there are none."""
    calls = message.get("tool_calls") or []
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list | tuple):
        raise Unparseable(f"tool_calls must be a list, got {type(calls).__name__}")
    if not calls and message.get("function_call"):
        calls = [message["function_call"]]
    if not calls and isinstance(message.get("content"), list):
        calls = [block for block in map(_plain, message["content"])
                 if isinstance(block, dict) and block.get("type") == "tool_use"]
    if not calls:
        raise NoToolCall("no respond tool call in the reply" + _answered_in_text(message))
    return list(calls)


def _answered_in_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        return f" (it answered in text: {_snippet(content)})"
    return ""


def _plain(raw: Any) -> Any:
    """Objects with ``model_dump`` (pydantic, litellm responses) or ``__dict__`` as dicts."""
    if hasattr(raw, "model_dump") and not isinstance(raw, type):
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
        # JSON orjson refuses for a lone surrogate escape ("\ud83d" alone): the json
        # module reads it, and keeps the pairs beside it whole, as a literal would not.
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        pass
    try:
        return _literal(ast.parse(text, mode="eval").body)
    # TypeError: a literal mapping with a list for a key ({[1]: 2}).
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as error:
        raise Unparseable(f"not JSON or a Python literal: {_snippet(text)}") from error


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity are refused, as orjson does


def _literal(node: ast.AST) -> Any:
    """A Python repr read as data, never evaluated: literals as themselves, and calls with
    keyword arguments only (the repr of client objects, ``Function(name='respond', ...)``)
    as dicts of their arguments."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_literal(key): _literal(value)
                for key, value in zip(node.keys, node.values, strict=True) if key is not None}
    if isinstance(node, ast.Call) and not node.args and all(k.arg for k in node.keywords):
        return {keyword.arg: _literal(keyword.value) for keyword in node.keywords}
    raise ValueError(f"not a literal: {type(node).__name__}")


def _first_message(response: dict[str, Any]) -> Any:
    choices = response.get("choices") or []
    if not isinstance(choices, list | tuple):
        raise Unparseable(f"choices must be a list, got {type(choices).__name__}")
    if not choices:
        raise Unparseable("the completion has no choices")
    choice = _plain(choices[0])
    return _plain(choice.get("message") if isinstance(choice, dict) else None) or {}


def _pick_call(calls: list[Any]) -> Any:
    """The respond call among several (the first call when none is named respond)."""
    if not calls:
        raise Unparseable("empty list of tool calls")
    for call in calls:
        if _call_name(_plain(call)) == RESPOND:
            return call
    return calls[0]


def _call_name(call: Any) -> Any:
    if not isinstance(call, dict):
        return None
    function = _plain(call.get("function"))
    return function.get("name") if isinstance(function, dict) else call.get("name")


def _score(value: Any) -> float:
    if isinstance(value, bool):
        raise Unparseable(f"score must be a number, got {value!r}")
    if value is None:
        return 0.0
    if isinstance(value, int):
        return float(min(1, max(0, value)))  # exact: float() overflows beyond 1e308
    try:
        score = float(value)
    except (TypeError, ValueError) as error:
        raise Unparseable(f"score must be a number, got {_snippet(value)}") from error
    if math.isnan(score):
        raise Unparseable("score is NaN")
    return min(1.0, max(0.0, score))


def _message(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError as error:  # an integer of more than 4,300 digits
            raise Unparseable("message is a number too long to print") from error
    raise Unparseable(f"message must be text, got {type(value).__name__}")


def _snippet(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except (ValueError, RecursionError):  # huge integers, deeply nested data
        text = f"<{type(value).__name__}>"
    return repr(text[:_SNIPPET_CHARS] + ("..." if len(text) > _SNIPPET_CHARS else ""))


def parse_text(raw: Any) -> ParsedBid:
    """The text of a plain reply (a selector's pick, a participant's message): the
    completion's content, or a respond call's message; empty with a reason if none."""
    try:
        text = _text(raw, _MAX_DEPTH)
    except Unparseable as error:
        return unparsed(error)
    return ParsedBid(message=text.strip())


def _text(raw: Any, depth: int) -> str:
    if depth <= 0:
        raise Unparseable("output nested too deeply")
    raw = _plain(raw)
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict) and "choices" in raw:
        return _text(_first_message(raw), depth - 1)
    if isinstance(raw, dict):
        content = raw.get("content")
        if isinstance(content, list):  # content blocks (Anthropic): their text, in order
            content = "".join(str(_plain(block).get("text") or "") for block in content
                              if isinstance(_plain(block), dict))
        if isinstance(content, str) and content.strip():
            return content
        if raw.get("tool_calls") or raw.get("function_call") or "message" in raw:
            return _decision(raw, depth - 1)[1]
    raise Unparseable(f"no text in the output: {_snippet(raw)}")
