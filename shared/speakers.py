"""Names as a reader tells them apart, and speaker lines: a line of a message that reads as
a participant taking the floor.

Two names are one participant when a reader could take one for the other: they have the
same ``name_skeleton``, Unicode's confusable detection (UTS #39) after NFKC and case
folding, with format characters (zero-width spaces, soft hyphens, bidi controls) removed
and separators (spaces, ``_``, ``.``, ``-``) ignored. So ``Budget_Checker`` is
``Budget Checker`` (the chat ``name`` field gives it that form), and ``0ptimist``,
``Optimist.``, ``Optimist_``, ``Optim\\u200bist`` and a Cyrillic ``О``ptimist are all
``Optimist``; ``Ann`` and ``Anna`` stay two names. The one comparison is used by the post
check (people post under their own names), the prompt quoting and the reply cut.

A speaker line starts, after optional spaces, Markdown emphasis (``*``, ``_``) and format
characters, with a participant's name, optionally a parenthesised role, and then a colon.
A line starts after any break a model could read as one (CR and U+2028 too); a full-width
colon counts as a colon:

    Optimist: I agree            **Optimist**: I agree        __optimist:__ I agree
    Optimist (argues for the upside): I agree                 Budget_Checker: fine

A colon anywhere else is ordinary text: ``Note: ...``, ``https://...``, ``10:30``,
``- Optimist: ship it`` (a list item), ``> Optimist: ...`` (already a quotation).

Workers quote such lines in what other agents read (so that content cannot pass for a new
speaker's turn); the floor policies cut an agent's reply at the first one naming someone
else (seed 002's impersonation rule). Lines are found by one regex that names nobody, and
each line's name is looked up by its skeleton: the work is linear in the text whatever the
number of names, and a room's matcher is built once. Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from functools import lru_cache
from importlib import resources

# The quotation mark put before a speaker line inside another speaker's message.
QUOTE = "> "
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
# What may stand between a line's start and its colon for the line to name a speaker: a
# name is at most 64 characters, and this leaves room for emphasis and invisible ones.
MAX_SPOKEN_CHARS = 400
# One regex for every room: the line's text up to its first colon or role (possessive, so
# a line is read once), whichever names it holds.
_SPEAKER_LINE = re.compile(
    rf"^{_DECORATION}(?P<name>[^:\uff1a(){_BREAKS}]{{1,{MAX_SPOKEN_CHARS}}}+){_ROLE}{_COLON}",
    re.MULTILINE,
)
# Between the words of a name: ignored, as are spaces and dashes of every script.
_SEPARATORS = frozenset(" _.-")
_SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Pc", "Pd"})
# Default-ignorable characters that are not format characters (Cf): the combining grapheme
# joiner, Hangul fillers, Khmer inherent vowels and Mongolian variation selectors.
_OTHER_IGNORABLE = frozenset(map(chr, [0x34F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C,
                                       0x180D, 0x180F, 0x3164, 0xFFA0]))
# Case folding can make a prototype a source again (``M`` folds to ``m``, whose prototype
# is ``rn``): the skeleton is folded and mapped again until it holds, a few rounds at most.
_MOST_FOLDS = 4


@lru_cache(maxsize=1)
def prototypes() -> dict[str, str]:
    """Unicode's confusables table (UTS #39, ``shared/unicode/confusables.txt``): each
    confusable character -> its prototype."""
    text = resources.files("parley.shared").joinpath("unicode", "confusables.txt").read_text(
        encoding="utf-8")
    table = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            source, _, prototype = line.partition(";")
            table[chr(int(source, 16))] = "".join(chr(int(point, 16)) for point in prototype.split())
    return table


def ignorable(char: str) -> bool:
    """True for a character a reader does not see: a format character (zero-width space,
    soft hyphen, bidi control), a variation selector or another default-ignorable one."""
    point = ord(char)
    return (unicodedata.category(char) == "Cf" or 0xFE00 <= point <= 0xFE0F
            or 0xE0100 <= point <= 0xE01EF or char in _OTHER_IGNORABLE)


def separator(char: str) -> bool:
    """True for a character that separates a name's words: a space, ``_``, ``.``, ``-`` or
    a space, connector or dash of another script."""
    return char in _SEPARATORS or unicodedata.category(char) in _SEPARATOR_CATEGORIES


def skeleton(text: str) -> str:
    """UTS #39's skeleton: NFD, each character replaced by its prototype, NFD again."""
    table = prototypes()
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFD", "".join(table.get(char, char) for char in decomposed))


@lru_cache(maxsize=65536)
def name_skeleton(name: str) -> str:
    """What ``name`` is compared by: equal for two names a reader could take for one
    another (see the module's docstring), empty for a name with nothing visible in it."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    folded = "".join(char for char in folded if not ignorable(char))
    for _ in range(_MOST_FOLDS):
        mapped = skeleton(folded).casefold()
        if mapped == folded:
            break
        folded = mapped
    return "".join(char for char in folded if not separator(char))


def same_name(one: str, other: str) -> bool:
    """True when a reader could take ``one`` for ``other``."""
    return name_skeleton(one) == name_skeleton(other)


def _starts_a_name(spoken: str) -> bool:
    """True when the first visible character of ``spoken`` (past spaces, emphasis and
    invisible characters) is a letter or a digit, as a name's first character is; a list
    item's dash or a quotation's ``>`` is not."""
    first = next((char for char in spoken
                  if not (char.isspace() or char in "*_" or ignorable(char))), "")
    return unicodedata.normalize("NFKC", first)[:1].isalnum()


class SpeakerLines:
    """The speaker lines of texts for one set of names (a room's participants): built once,
    then each text is read in time linear in its length."""

    def __init__(self, names: Iterable[str]) -> None:
        self.by_skeleton: dict[str, str] = {}
        for name in names:  # the first of two names a reader cannot tell apart wins
            key = name_skeleton(name)
            if key:
                self.by_skeleton.setdefault(key, name)

    def speaker(self, spoken: str) -> str | None:
        """The participant (as spelled in the names) a line's text before its colon speaks
        as, or None."""
        if not _starts_a_name(spoken):
            return None
        return self.by_skeleton.get(name_skeleton(spoken.replace("*", "")))

    def find(self, text: str) -> Iterator[tuple[int, str]]:
        """Where each speaker line of ``text`` starts, and whose name it speaks under."""
        if not self.by_skeleton:
            return
        for found in _SPEAKER_LINE.finditer(_OTHER_BREAK.sub("\n", text)):
            name = self.speaker(found.group("name"))
            if name is not None:
                yield found.start(), name

    def first(self, text: str, besides: str | None = None) -> tuple[int, str] | None:
        """The first speaker line of ``text`` naming someone other than ``besides``: where
        it starts and whose name it speaks under; None when no line does."""
        return next(((start, name) for start, name in self.find(text) if name != besides),
                    None)

    def quote(self, text: str) -> str:
        """``text`` with every speaker line quoted as a Markdown blockquote
        (``> Optimist: ...``): read as a quotation inside the message, never as a new
        turn."""
        parts, done = [], 0
        for start, _name in self.find(text):
            parts += [text[done:start], QUOTE]
            done = start
        return "".join([*parts, text[done:]])


@lru_cache(maxsize=256)
def _speaker_lines(names: tuple[str, ...]) -> SpeakerLines:
    return SpeakerLines(names)


def speaker_lines(names: Iterable[str]) -> SpeakerLines:
    """The matcher for ``names``, built once per set of names (kept for the most recent
    256 sets: a process serves many rooms)."""
    return _speaker_lines(tuple(names))


def first_speaker_line(text: str, names: Iterable[str]) -> tuple[int, str] | None:
    """Where the first speaker line naming one of ``names`` starts in ``text``, and whose
    name it speaks under (as spelled in ``names``); None when no line does."""
    return speaker_lines(names).first(text)


def quote_speaker_lines(text: str, names: Iterable[str]) -> str:
    """``text`` with every speaker line naming one of ``names`` quoted (see
    SpeakerLines.quote)."""
    return speaker_lines(names).quote(text)
