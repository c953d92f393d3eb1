"""How a validation problem is told, in one line naming each field as its writer wrote it:
a room spec's (a file, an HTTP body), a setting's (its ``PARLEY_*`` variable), an agent's.

A leaf module: the CLI, the API and GroupChat all describe their input's problems here.
"""

from __future__ import annotations

from pydantic import ValidationError

from parley.shared.logs import one_line
from parley.shared.models import POLICY_KINDS
from parley.shared.settings import Settings, variable_name


def describe_validation(error: ValidationError) -> str:
    """Each problem as ``field.path: message``, joined into one line."""
    problems = []
    for item in error.errors():
        loc = list(item["loc"])
        if loc[:1] == ["policy"] and len(loc) > 2 and loc[1] in POLICY_KINDS:
            del loc[1]  # the union's tag: the user wrote policy.threshold, not policy.bid...
        where = ".".join(str(part) for part in loc) or "spec"
        # pydantic prefixes our own rules' messages; the field already says where.
        problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)


def describe_invalid(error: ValidationError) -> str:
    """A validation error as one line: a bad setting names its ``PARLEY_*`` variable."""
    if error.title == Settings.__name__:
        return describe_settings(error)
    return f"invalid {error.title}: {describe_validation(error)}"


def describe_settings(error: ValidationError) -> str:
    """Each bad setting as ``invalid setting PARLEY_<FIELD>: message``, joined into one
    line. The value is not shown: it may hold a password."""
    problems = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        if not item["loc"]:  # a rule over several settings names them itself
            problems.append(f"invalid settings: {message}")
            continue
        variable = variable_name(str(item["loc"][0]))
        problems.append(f"invalid setting {variable}: {message.removeprefix(f'{variable}: ')}")
    return "; ".join(problems)


def describe_fields(error: ValidationError, spelled: dict[str, str] | None = None) -> str:
    """Each problem as ``field: rule`` on one line, fields spelled as the caller wrote
    them (``spelled`` maps a spec field to the caller's name for it)."""
    problems = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        if loc and spelled:
            loc[0] = spelled.get(loc[0], loc[0])
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{'.'.join(loc)}: {message}" if loc else message)
    return one_line("; ".join(problems))
