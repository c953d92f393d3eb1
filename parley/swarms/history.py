"""swarms' history formats: a GroupChat's conversation in each of the 14 output types of
swarms' ``history_output_formatter``, exactly as swarms gives them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml

from parley.shared.litellm_env import use_local_cost_map
from parley.shared.models import Message

# swarms' history formats, as swarms 16's ``history_output_formatter`` gives them for a
# GroupChat's conversation (tests/fixtures/swarms_outputs.json holds its real outputs).
HISTORY_OUTPUT_TYPES = (
    "list", "dict", "dictionary", "string", "str", "final", "last", "json", "all", "yaml",
    "dict-all-except-first", "str-all-except-first", "dict-final", "list-final",
)
# swarms' Conversation renders "str" from the newest lines that fit its default context,
# counted by litellm's tokenizer for its default model.
SWARMS_CONTEXT_TOKENS = 8192
SWARMS_TOKENIZER_MODEL = "gpt-5.4"


def conversation_rows(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as swarms' ``Conversation.conversation_history`` holds a GroupChat's:
    role and content, and ``metadata: {score}`` on scored (agent) messages only."""
    rows = []
    for message in messages:
        row: dict[str, Any] = {"role": message.sender, "content": message.content}
        if message.score is not None:
            row["metadata"] = {"score": message.score}
        rows.append(row)
    return rows


def format_history(messages: list[Message], output_type: str) -> Any:
    """The conversation in one of swarms' output types (``HISTORY_OUTPUT_TYPES``)."""
    return format_rows(conversation_rows(messages), output_type)


def format_rows(rows: list[dict[str, Any]], output_type: str) -> Any:
    """``rows`` (as ``conversation_rows`` gives them) in one of swarms' output types, with
    swarms' Python types: ``dict-final`` is a tuple, ``list-final`` a one-element list."""
    formats: dict[str, Callable[[], Any]] = {
        "list": lambda: [{"role": row["role"], "content": row["content"]} for row in rows],
        "dict": lambda: rows,
        "str": lambda: history_string(rows),
        "final": lambda: rows[-1]["content"] if rows else "",
        "json": lambda: json.dumps(rows),
        "yaml": lambda: yaml.safe_dump(rows, sort_keys=False),
        "dict-all-except-first": lambda: rows[_after_first_input(rows):],
        "str-all-except-first": lambda: "\n".join(
            f"{row['content']}" for row in rows[_after_first_input(rows):]),
        # A tuple of the content twice, and IndexError on no rows: swarms' own shapes.
        "dict-final": lambda: (rows[-1]["content"], rows[-1]["content"]),
        "list-final": lambda: [rows[-1]["content"]],
    }
    aliases = {"dictionary": "dict", "string": "str", "all": "str", "last": "final"}
    if output_type not in HISTORY_OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {', '.join(HISTORY_OUTPUT_TYPES)}, "
                         f"not {output_type!r}")
    return formats[aliases.get(output_type, output_type)]()


def _after_first_input(rows: list[dict[str, Any]]) -> int:
    # Past the first input, and past a System row before it when there is one.
    return (1 if rows and rows[0].get("role") == "System" else 0) + 1


def history_string(rows: list[dict[str, Any]]) -> str:
    """``role: content`` per row, blank-line separated: the newest rows that fit in
    ``SWARMS_CONTEXT_TOKENS`` (one token per separator), then the longest tail of the
    first row that does not, as swarms renders a long history."""
    lines = [f"{row['role']}: {row['content']}" for row in rows]
    # A token is at least one byte: a history of fewer bytes than the budget always fits,
    # and needs no tokenizer.
    if sum(len(line.encode()) for line in lines) + len(lines) - 1 <= SWARMS_CONTEXT_TOKENS:
        return "\n\n".join(lines)
    budget = SWARMS_CONTEXT_TOKENS
    kept: list[str] = []
    for line in reversed(lines):
        tokens = swarms_token_count(line)
        separator = 1 if kept else 0
        if tokens + separator > budget:
            tail = _longest_tail(line, budget - separator)
            if tail:
                kept.append(tail)
            break
        kept.append(line)
        budget -= tokens + separator
    return "\n\n".join(reversed(kept))


def _longest_tail(text: str, most_tokens: int) -> str:
    # swarms' binary search for the shortest cut from the front that fits.
    if most_tokens <= 0:
        return ""
    left, right = 0, len(text)
    while left < right:
        middle = (left + right) // 2
        if swarms_token_count(text[middle:]) <= most_tokens:
            right = middle
        else:
            left = middle + 1
    return text[left:]


def swarms_token_count(text: str) -> int:
    """Tokens in ``text`` as swarms counts them (none in blank text)."""
    if not text.strip():
        return 0
    use_local_cost_map()
    import litellm  # importing litellm takes seconds: only long histories pay for it

    return len(litellm.encode(model=SWARMS_TOKENIZER_MODEL, text=text))
