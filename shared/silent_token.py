"""Reading a mention room's silent token in an agent's answer (seed 003, to the letter):
"read ignoring case, a final period and its brackets".

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
case                   ``(SILENT)`` is ``(silent)``
final period           ``silent.``, ``(silent).`` and ``(Silent.)`` are ``(silent)``
brackets               ``silent``, ``[silent]``, ``{silent}`` and ``<silent>`` are too
anything else          is a message: ``silent here``, ``(silent) ok``, ``...``
a stream               held back while what came so far could still end as the token
=====================  =================================================================
"""

from __future__ import annotations

BRACKETS = "()[]{}<>"


def bare(text: str) -> str:
    """The word inside: surrounding space, brackets and a final period (inside the
    brackets or after them) left out, case folded."""
    word = text.strip().rstrip(".").strip()
    word = word.strip(BRACKETS + " \t").strip().rstrip(".").strip()
    return word.casefold()


def is_silent(answer: str, token: str) -> bool:
    """True when ``answer`` is the silent ``token``, read as the seed reads it."""
    return bare(answer) == bare(token)


def may_become_silent(start: str, token: str) -> bool:
    """True while ``start``, the beginning of an answer, could still end as the silent
    ``token``: a stream holds it back until it cannot. Errs on holding: the end of the
    answer settles it (see is_silent)."""
    word = bare(token)
    rest = start.lstrip().lstrip(BRACKETS + " \t").lstrip().casefold()
    if word.startswith(rest):
        return True
    return rest.startswith(word) and not rest[len(word):].strip(BRACKETS + ". \t\n")
