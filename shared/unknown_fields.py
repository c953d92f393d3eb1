"""An unknown field of a spec named with the nearest valid ones: ``limits.max_tokens:
Extra inputs are not permitted: did you mean max_tokens_per_run or max_tokens_per_room?``

pydantic only says "Extra inputs are not permitted". Each spec model (models.Strict)
passes its validation errors through ``with_hints``, which rewrites the errors of its own
unknown fields and keeps every other error as it was.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, get_args

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

UNKNOWN = "extra_forbidden"
_PYDANTIC_TYPES = frozenset(get_args(ErrorType))
# How alike a name must be to a field to be offered alone (difflib's ratio, 0 to 1); a
# second field is offered too when it is about as alike as the first.
CLOSE = 0.6
ABOUT_AS = 0.1


def likeness(name: str, field: str) -> float:
    """How alike ``name`` is to ``field``, case aside: difflib's ratio, and at least 0.8
    when one starts the other (``temp`` is ``temperature`` cut short)."""
    a, b = name.casefold(), field.casefold()
    ratio = difflib.SequenceMatcher(None, a, b).ratio()
    return max(ratio, 0.8) if a and (b.startswith(a) or a.startswith(b)) else ratio


def nearest(name: str, fields: Sequence[str]) -> list[str]:
    """The one or two fields ``name`` is likeliest meant to be, likeliest first."""
    ranked = sorted(fields, key=lambda field: -likeness(name, field))
    best = likeness(name, ranked[0]) if ranked else 0.0
    return [field for field in ranked[:2] if likeness(name, field) >= best - ABOUT_AS]


def hint(name: str, fields: Sequence[str]) -> str:
    """What to say of the unknown field ``name`` among ``fields``: the nearest, and every
    field when none is close."""
    found = nearest(name, fields)
    if not found:
        return "Extra inputs are not permitted: this takes no fields"
    said = f"Extra inputs are not permitted: did you mean {' or '.join(found)}?"
    if likeness(name, found[0]) < CLOSE:
        said += f" (the fields here: {', '.join(fields)})"
    return said


def has_unknown(error: ValidationError) -> bool:
    """True when the error names an unknown field of the model that raised it."""
    return any(item["type"] == UNKNOWN and len(item["loc"]) == 1 for item in error.errors())


def with_hints(error: ValidationError, fields: Sequence[str]) -> ValidationError:
    """``error`` with each unknown field of its model (``fields``) hinted at."""
    return ValidationError.from_exception_data(
        error.title, [_detail(item, fields) for item in error.errors()], hide_input=True)


def _detail(item: Any, fields: Sequence[str]) -> InitErrorDetails:
    loc, value = item["loc"], item.get("input")
    if item["type"] == UNKNOWN:
        said = hint(str(loc[0]), fields) if len(loc) == 1 else item["msg"]
        return {"type": PydanticCustomError(UNKNOWN, said), "loc": loc, "input": value}
    if item["type"] in _PYDANTIC_TYPES:
        return {"type": item["type"], "loc": loc, "input": value, "ctx": item.get("ctx", {})}
    # A rule of our own (PydanticCustomError): its message is already said.
    return {"type": PydanticCustomError(item["type"], item["msg"]), "loc": loc, "input": value}
