"""Text from rooms as a terminal may show it: what people and models write is shown, never
obeyed.

A post or a reply can hold bytes a terminal acts on: ESC and CSI sequences (colours, cursor
moves that overwrite what was printed), OSC sequences (the window title, OSC 52 the
clipboard), a carriage return that prints over its line, and bidi overrides that show text
in another order than it is stored. Every terminal printer passes such text through
``terminal_text``: each C0 and C1 control character, DEL, line or paragraph separator and
bidi control is shown escaped (``\\x1b``, ``\\u202e``). Where a message's own line breaks
are shown, every following line starts with ``CONTINUATION``, so that no line of a message
can pass for another speaker's (``  4 Optimist: ...``) or for a turn's line.

``terminal_json`` is the same for JSON printed to a terminal: the characters JSON leaves
raw are written as ``\\uXXXX`` escapes, which any JSON reader reads back as they were.
"""

from __future__ import annotations

import json
import re
from typing import Any

# What marks each line of a message after its first.
CONTINUATION = "    | "
# C0 (newline and tab included), DEL and C1 controls; other line breaks; bidi embeddings,
# overrides, isolates and marks.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                      "\u200e\u200f\u061c]")
_NEWLINE = "\n"


def _escaped(found: re.Match[str]) -> str:
    point = ord(found.group())
    return f"\\x{point:02x}" if point <= 0xFF else f"\\u{point:04x}"


def terminal_text(text: str, continuation: str | None = None) -> str:
    """``text`` with every control character escaped; with ``continuation``, its line
    breaks are kept and each line after the first starts with ``continuation``."""
    if continuation is None:
        return _CONTROL.sub(_escaped, text)
    return (_NEWLINE + continuation).join(_CONTROL.sub(_escaped, line)
                                          for line in text.split(_NEWLINE))


def terminal_json(value: Any) -> str:
    """``value`` as one line of JSON (non-ASCII text kept as it is) in which no control
    character, separator or bidi control stands raw."""
    return _CONTROL.sub(lambda found: f"\\u{ord(found.group()):04x}",
                        json.dumps(value, ensure_ascii=False))
