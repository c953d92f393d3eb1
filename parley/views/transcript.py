"""A conversation as plain text, one message a line."""

from __future__ import annotations

from parley.shared.models import Message


def transcript_text(messages: list[Message]) -> str:
    """The whole conversation as plain text, one message a line as ``parley follow``
    prints it: seq, sender, score (agents only), content."""
    return "\n".join(
        f"{m.seq:>3} {m.sender}{'' if m.score is None else f' (score {m.score:.2f})'}: "
        f"{m.content}" for m in messages)

