"""How large a room spec may be, and the walk that measures a loaded one.

A spec is data from whoever creates rooms. It is stored in Redis and read by every
coordinator and worker of its room, so every spec that validates must be storable and
runnable, and no spec may cost the service more than its text cost its author:

=======================  ============  ==========================================================
bound                    limit         what it bounds
=======================  ============  ==========================================================
``MAX_SPEC_BYTES``       1 MiB         the spec's text as given (a file, a request body)
``MAX_SPEC_DEPTH``       32 levels     nested mappings and lists
``MAX_SPEC_NODES``       500,000       mappings, lists, keys and values, YAML aliases expanded
``MAX_SPEC_JSON_BYTES``  2 MiB         the spec as stored in Redis; also its text, aliases expanded
``MAX_DURATION_S``       3,600 s       ``bid_timeout_s``, an agent's ``timeout_s``, a script's
                                       ``sleep``
``MAX_REPLY_TOKENS``     1,000,000     an agent's ``max_tokens``
``MAX_CONTEXT_TOKENS``   10,000,000    an agent's ``max_context_tokens``
``MAX_RUN_MESSAGES``     1,000,000     ``max_messages``, ``recency_window``, ``max_turns``, a
                                       round-table's ``rounds`` x panelists
``MAX_BUDGET_TOKENS``    10**12        a token limit of ``limits`` (per run or per room)
``MAX_BUDGET_USD``       10**9         a cost limit of ``limits``, in US dollars
``MAX_PLAIN_INT``        2**63 - 1     integers in free-form values (script scores and
                                       messages, ``litellm_kwargs``); ``recency_window``
                                       below 0 (kept as given, read as 1)
``DEFAULT_MAX_AGENTS``   256           a new room's agents, unless the operator's
                                       ``PARLEY_MAX_AGENTS`` says otherwise
=======================  ============  ==========================================================

The agents' bound is the operator's (a setting), so it applies where a room is created and
where a spec is checked for creating one (``RoomSpec.model_validate`` with
``create_context``), never when a stored spec is read back: a room created under a raised
bound stays readable after the bound is lowered.

Numbers are finite everywhere (JSON has no infinity: it would be stored as null), and
text is Unicode text: a surrogate code point cannot be stored as UTF-8 (a pair would be
stored as the character it stands for, and read back different).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from pydantic import BaseModel

MAX_SPEC_BYTES = 1 << 20
MAX_SPEC_DEPTH = 32
MAX_SPEC_NODES = 500_000
MAX_SPEC_JSON_BYTES = 2 << 20
MAX_DURATION_S = 3600.0
MAX_REPLY_TOKENS = 1_000_000
MAX_CONTEXT_TOKENS = 10_000_000
MAX_RUN_MESSAGES = 1_000_000
# Totals are kept as Redis floats: up to 2**53 they count tokens exactly.
MAX_BUDGET_TOKENS = 10**12
MAX_BUDGET_USD = 1e9
MAX_PLAIN_INT = 2**63 - 1
# Every turn's work (fan-out, collection, the cut, the turn record) grows with the agents.
DEFAULT_MAX_AGENTS = 256
MAX_AGENTS_SETTING = "PARLEY_MAX_AGENTS"
# The validation context key that carries the bound to RoomSpec's validators.
MAX_AGENTS_CONTEXT = "max_agents"
# The validation context key of a spec read back from its room's store: it was checked
# against every bound when it was written, and walking it again for each of them was most
# of a worker's CPU for a room's first call (once per room and worker).
STORED_CONTEXT = "stored"
STORED = {STORED_CONTEXT: True}
_SURROGATE = re.compile("[\ud800-\udfff]")


class SpecTooLarge(ValueError):
    """A room spec over one of the size bounds; the message names the bound."""


class NotText(ValueError):
    """A room spec holding a string that is not Unicode text."""


class TooManyAgents(ValueError):
    """A new room spec with more agents than the operator allows; the message names the
    bound and its setting."""


def create_context(max_agents: int) -> dict[str, Any]:
    """The validation context of a spec checked for creating a room under ``max_agents``."""
    return {MAX_AGENTS_CONTEXT: max_agents}


def is_stored(context: dict[str, Any] | None) -> bool:
    """True when a validation ``context`` is a stored spec's (STORED)."""
    return bool((context or {}).get(STORED_CONTEXT))


def check_agent_count(count: int, max_agents: int) -> None:
    """Raise TooManyAgents when a new room's ``count`` agents are over ``max_agents``."""
    if count > max_agents:
        raise TooManyAgents(f"a room may have at most {max_agents:,} agents "
                            f"({MAX_AGENTS_SETTING}), this spec has {count:,}")


class Extent(NamedTuple):
    """The size of one loaded value with its aliases expanded."""

    nodes: int  # mappings, lists, keys and values
    chars: int  # characters of text
    height: int  # levels of nested mappings and lists, 0 for a scalar


def check_text_size(size: int) -> None:
    """Raise SpecTooLarge when a spec's text of ``size`` bytes is over the bound."""
    if size > MAX_SPEC_BYTES:
        raise SpecTooLarge(f"room spec too large: {size:,} bytes (limit {MAX_SPEC_BYTES:,})")


def check_stored_size(size: int) -> None:
    """Raise SpecTooLarge when a spec stored as ``size`` bytes of JSON is over the bound."""
    if size > MAX_SPEC_JSON_BYTES:
        raise SpecTooLarge(f"room spec too large: {size:,} bytes as stored JSON "
                           f"(limit {MAX_SPEC_JSON_BYTES:,})")


def check_document_size(document: Any) -> Extent:
    """The extent of a loaded spec (YAML/JSON data, models inside it); SpecTooLarge when it
    is over a bound, NotText when a string in it holds a surrogate.

    Each distinct mapping or list is measured once and its extent reused wherever it
    appears again, so the walk is linear in the document's distinct nodes: a YAML alias
    bomb costs what its text costs, and is refused before anything expands it.
    """
    children = _children(document)
    if children is None:
        return Extent(nodes=1, chars=_text_length(document), height=0)
    return _measure(document, children, 1, {})


def _measure(node: Any, children: list[Any], level: int, seen: dict[int, Extent]) -> Extent:
    if level > MAX_SPEC_DEPTH:
        raise _too_deep(level)
    extent = seen.get(id(node))
    if extent is None:
        extent = seen[id(node)] = _sum(children, level, seen)
    if level + extent.height - 1 > MAX_SPEC_DEPTH:
        raise _too_deep(level + extent.height - 1)
    return extent


def _sum(children: list[Any], level: int, seen: dict[int, Extent]) -> Extent:
    nodes, chars, height = 1, 0, 0
    for child in children:
        inner = _children(child)
        if inner is None:  # a scalar: most nodes, so counted here, not in a call
            nodes, chars = nodes + 1, chars + _text_length(child)
            continue
        extent = _measure(child, inner, level + 1, seen)
        nodes, chars = nodes + extent.nodes, chars + extent.chars
        height = max(height, extent.height)
        _check_totals(nodes, chars)
    _check_totals(nodes, chars)
    return Extent(nodes=nodes, chars=chars, height=height + 1)


def _check_totals(nodes: int, chars: int) -> None:
    if nodes > MAX_SPEC_NODES:
        raise SpecTooLarge(f"room spec too large: at least {nodes:,} values once YAML "
                           f"aliases are expanded (limit {MAX_SPEC_NODES:,})")
    if chars > MAX_SPEC_JSON_BYTES:
        raise SpecTooLarge(f"room spec too large: at least {chars:,} characters of text "
                           f"once YAML aliases are expanded (limit {MAX_SPEC_JSON_BYTES:,})")


def _text_length(scalar: Any) -> int:
    """Characters of text in a scalar (0 for numbers and the like); NotText for a string
    holding a surrogate."""
    if isinstance(scalar, str):
        if not scalar.isascii() and _SURROGATE.search(scalar):
            raise NotText("room spec text holds a surrogate code point (\\ud800-\\udfff), "
                          "which is not Unicode text")
        return len(scalar)
    return len(scalar) if isinstance(scalar, bytes) else 0


def _children(node: Any) -> list[Any] | None:
    """A container's keys and values; None for a scalar."""
    if isinstance(node, str | int | float | None):  # most nodes: answered first
        return None
    if isinstance(node, dict):
        return [*node.keys(), *node.values()]
    if isinstance(node, list | tuple | set | frozenset):
        return list(node)
    if isinstance(node, BaseModel):
        return list(vars(node).values())
    return None


def _too_deep(level: int) -> SpecTooLarge:
    return SpecTooLarge(f"room spec too large: nested {level} levels deep "
                        f"(limit {MAX_SPEC_DEPTH})")
