"""The CLI's error wording: every expected failure as one line on stderr and an exit code,
without a traceback (bad input, a Redis that cannot be used, a run that timed out, a
setting that cannot work)."""

from __future__ import annotations

import re
import ssl
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any

import redis
import typer
import yaml
from pydantic import ValidationError

from parley.client.results import RunTimeout
from parley.shared.approvals import ApprovalNotFound, NotAnApprover
from parley.shared.logs import one_line
from parley.shared.settings import get_settings, redact_url
from parley.shared.store import RoomExists, RoomNotFound
from parley.shared.tasks import TaskNotFound
from parley.views.problems import describe_invalid, describe_validation
from parley.views.redis_problems import unreachable_redis
from parley.views.terminal_text import terminal_text

# Exit codes, for scripts: 0 the command did what was asked (a run ended idle, whatever
# its stop reason), 1 a run ended failed, 2 bad input or a Redis that cannot be used,
# 3 a run that did not start or end in time.
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
# PyYAML names the text it read, not the file: the error line names the file already.
_YAML_SOURCE = re.compile(r'\s+in "<[a-z ]+>", (\S.*)')


class CliError(Exception):
    """A failure to report as one line, without a traceback."""


def full_redis(url: str) -> str:
    """Why Redis at ``url`` refused a write, as one line: it is out of memory."""
    return (f"Redis at {redact_url(url)} is out of memory (maxmemory reached) and refuses "
            "writes until memory is freed: raise its maxmemory or free some "
            "(redis-cli INFO memory)")


@contextmanager
def settings_that_work() -> Iterator[None]:
    """For a long-running command's start-up: a setting that cannot work (a bad PARLEY_*
    value, a TLS file missing) is one line and exit 2; once serving, errors keep their
    tracebacks for operators."""
    try:
        yield
    except ValidationError as error:
        message = describe_invalid(error)
    except ValueError as error:  # RedisTlsError and the settings' own checks
        message = str(error)
    else:
        return
    print(f"parley: {terminal_text(one_line(message))}", file=sys.stderr)
    raise typer.Exit(EXIT_BAD_INPUT)


def friendly(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected failures into one clear line on stderr: exit code 3 for a run that
    timed out, 2 for everything else (bad input, a Redis that cannot be used)."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        code = EXIT_BAD_INPUT
        try:
            get_settings()
            return command(*args, **kwargs)
        except RunTimeout as error:
            message, code = str(error), EXIT_TIMEOUT
        # A hung server and a TLS mismatch are as much "cannot reach" as a closed port.
        except (redis.ConnectionError, redis.TimeoutError, ssl.SSLError) as error:
            message = unreachable_redis(get_settings().redis_url, error)
        except redis.OutOfMemoryError:
            message = full_redis(get_settings().redis_url)
        except ValidationError as error:
            message = describe_invalid(error)
        except (CliError, RoomNotFound, RoomExists, ApprovalNotFound, NotAnApprover,
                TaskNotFound, ValueError) as error:
            message = str(error)
        # Plain print: one line, never wrapped to the terminal's width.
        print(f"parley: {terminal_text(message)}", file=sys.stderr)
        raise typer.Exit(code)

    return wrapper


def spec_file_error(path: Path, error: Exception) -> CliError:
    """Why the spec file at ``path`` cannot be used, as one line naming the file (and each
    field, for a spec that is not valid)."""
    if isinstance(error, FileNotFoundError):
        return CliError(f"no such spec file: {path}")
    if isinstance(error, OSError):
        return file_error("read spec file", path, error)
    if isinstance(error, yaml.YAMLError):
        return CliError(f"{path} is not valid YAML: {describe_yaml(error)}")
    if isinstance(error, ValidationError):
        return CliError(one_line(f"invalid room spec {path}: {describe_validation(error)}"))
    return CliError(f"invalid room spec {path}: {error}")  # SpecTooLarge


def file_error(doing: str, path: Path, error: OSError) -> CliError:
    """``cannot write out.jsonl: Permission denied``: a file a command could not use."""
    return CliError(f"cannot {doing} {path}: {error.strerror or error}")


def bad_event_type(error: ValueError) -> CliError:
    """``--until`` given something that is not an event type (``error`` lists them)."""
    return CliError(f"--until {error}")


def bad_event_id(value: str) -> CliError:
    """``--after`` given something that is not a stream entry id."""
    return CliError(f"--after {value!r} is not an event id (like 1764500000123-0)")


def describe_yaml(error: yaml.YAMLError) -> str:
    """The YAML problem and where it is, as one line."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        context = f"{error.context}: " if error.context else ""
        return one_line(f"{context}{error.problem}{where}")
    return one_line(_YAML_SOURCE.sub(r" (\1)", str(error)))

