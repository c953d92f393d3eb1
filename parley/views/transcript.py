"""A conversation as plain text, as ``parley follow`` prints it."""

from __future__ import annotations

from parley.shared.models import Message
from parley.views.terminal_text import CONTINUATION, terminal_text
from parley.views.tool_calls import tool_lines


def transcript_text(messages: list[Message]) -> str:
    """The whole conversation as plain text as ``parley follow`` prints it: seq, sender,
    score (agents only), content, with control characters escaped and each line of a
    message after its first marked, then a line per tool call it was written from."""
    return "\n".join(
        "\n".join([f"{m.seq:>3} {terminal_text(m.sender)}"
                   f"{'' if m.score is None else f' (score {m.score:.2f})'}: "
                   f"{terminal_text(m.content, CONTINUATION)}", *tool_lines(m)])
        for m in messages)

