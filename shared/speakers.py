"""Speaker lines: a line of a message that reads as a participant taking the floor.

A speaker line starts, after optional spaces and Markdown emphasis (``*``, ``_``), with a
participant's name, optionally a parenthesised role, and then a colon. A line starts after
any break a model could read as one (CR and U+2028 too); zero-width characters count as
spaces, and a full-width colon as a colon:

    Optimist: I agree            **Optimist**: I agree        __optimist:__ I agree
    Optimist (argues for the upside): I agree                 Budget_Checker: fine

Names match case-insensitively, and a space, ``_`` or ``.`` between the words of a name
matches any run of those (``Budget Checker`` also matches ``Budget_Checker``, the form the
chat ``name`` field gives it). A colon anywhere else is ordinary text: ``Note: ...``,
``https://...``, ``10:30``, ``- Optimist: ship it`` (a list item), ``> Optimist: ...``
(already a quotation).

Workers quote such lines in what other agents read (so that content cannot pass for a new
speaker's turn); the floor policies cut an agent's reply at the first one naming someone
else (seed 002's impersonation rule). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# The quotation mark put before a speaker line inside another speaker's message.
QUOTE = "> "
_WORD_BREAK = re.compile(r"[\s_.]+")
# Every line break str.splitlines knows: a model may read any of them as a new line.
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
# Lines are found with ``^`` in a copy of the text whose breaks are all "\n": one character
# for one, so offsets hold; several times faster than a look-behind for every break.
_OTHER_BREAK = re.compile(f"[{_BREAKS[1:]}]")
# Spaces that are not line breaks, and zero-width characters a reader does not see.
_BLANK = rf"[^\S{_BREAKS}]|[\u200b-\u200f\u2060\ufeff]"
# Possessive (``*+``): a long run of spaces is read once, never backtracked into.
_DECORATION = rf"(?:{_BLANK}|[*_])*+"
_ROLE = rf"(?:\([^(){_BREAKS}]{{0,200}}\){_DECORATION})?"
_COLON = "[:\uff1a]"


def name_pattern(name: str) -> str:
    """A regex source matching ``name`` with any word break between its words."""
    words = [re.escape(word) for word in _WORD_BREAK.split(name) if word]
    return rf"(?:[_.]|{_BLANK})++".join(words)


@lru_cache(maxsize=256)
def _speaker_line(names: tuple[str, ...]) -> re.Pattern[str] | None:
    # Longest first, so that with both "Bob" and "Bob Jr" the group names the longer one.
    alternatives = sorted({name_pattern(name) for name in names} - {""},
                          key=lambda source: (-len(source), source))
    if not alternatives:
        return None
    return re.compile(
        rf"^{_DECORATION}(?P<name>{'|'.join(alternatives)}){_DECORATION}{_ROLE}{_COLON}",
        re.IGNORECASE | re.MULTILINE,
    )


def speaker_line_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """The compiled speaker-line regex for ``names`` (None when ``names`` holds none)."""
    return _speaker_line(tuple(names))


def canonical_name(spoken: str, names: Iterable[str]) -> str:
    """The participant's name as spelled in ``names`` for what a speaker line matched."""
    for name in names:
        if re.fullmatch(name_pattern(name), spoken, re.IGNORECASE):
            return name
    return spoken


def first_speaker_line(text: str, names: Iterable[str]) -> tuple[int, str] | None:
    """Where the first speaker line naming one of ``names`` starts in ``text``, and whose
    name it speaks under (as spelled in ``names``); None when no line does."""
    names = list(names)
    pattern = speaker_line_pattern(names)
    found = pattern.search(_OTHER_BREAK.sub("\n", text)) if pattern else None
    if found is None:
        return None
    return found.start(), canonical_name(found.group("name"), names)


def quote_speaker_lines(text: str, names: Iterable[str]) -> str:
    """``text`` with every speaker line naming one of ``names`` quoted as a Markdown
    blockquote (``> Optimist: ...``): read as a quotation inside the message, never as a
    new turn."""
    pattern = speaker_line_pattern(names)
    if pattern is None:
        return text
    parts, done = [], 0
    for found in pattern.finditer(_OTHER_BREAK.sub("\n", text)):
        parts += [text[done:found.start()], QUOTE]
        done = found.start()
    return "".join([*parts, text[done:]])
