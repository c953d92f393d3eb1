"""Python tools: functions a module marks with ``@parley.tool``, offered by the workers whose
``PARLEY_WORKER_TOOLS`` names that module.

    @parley.tool
    def search_logs(service: str, lines: int = 20) -> str:
        \"\"\"The service's last log lines.\"\"\"

    @parley.tool(approval=True, timeout_s=60, queue="ops")
    async def rollback(service: str) -> str: ...

A tool's name is its function's, its description the docstring's, its arguments' JSON
schema comes from the type hints through pydantic, which also checks the arguments a model
sends before the function runs. Sync functions run in a thread of their own, async ones on
an event loop the worker keeps, both bounded by the tool's timeout.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import cache
from typing import Any, get_type_hints, overload

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from parley.workers.tools.base import DEFAULT_TOOL_TIMEOUT_S, ToolDef, ToolError, ToolOptions

# The attribute @parley.tool sets on a function: its PythonTool.
MARK = "__parley_tool__"
# Sync tools each run in a thread of this pool; a tool past its timeout is abandoned
# there (Python cannot stop a thread), so the pool is wide.
_sync_calls = ThreadPoolExecutor(max_workers=256, thread_name_prefix="python-tool")


class ToolLoadError(Exception):
    """A tools module cannot be offered: its message is the one line the worker exits with."""


@dataclass(frozen=True)
class PythonTool:
    """A decorated function, its definition and the model that checks its arguments."""

    function: Callable[..., Any]
    definition: ToolDef
    arguments: type[BaseModel]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


@overload
def tool(function: Callable[..., Any], /) -> Callable[..., Any]: ...


@overload
def tool(*, approval: bool = False, idempotent: bool = False,
         timeout_s: float = DEFAULT_TOOL_TIMEOUT_S, queue: str | None = None
         ) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def tool(function: Callable[..., Any] | None = None, /, *, approval: bool = False,
         idempotent: bool = False, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
         queue: str | None = None) -> Any:
    """Mark ``function`` as a tool the worker offers, bare (``@parley.tool``) or with its
    options (``@parley.tool(approval=True, idempotent=True, timeout_s=10, queue="ops")``).
    The function itself is returned unchanged, still callable as before."""
    options = ToolOptions(approval=approval, idempotent=idempotent, timeout_s=timeout_s,
                          queue=queue)
    if timeout_s <= 0:
        raise ValueError(f"a tool's timeout_s must be positive, not {timeout_s}")

    def mark(target: Callable[..., Any]) -> Callable[..., Any]:
        setattr(target, MARK, describe(target, options))
        return target

    return mark(function) if function is not None else mark


def describe(function: Callable[..., Any], options: ToolOptions) -> PythonTool:
    """The tool ``function`` is: its name, docstring, the arguments' model and schema."""
    hints = get_type_hints(function)
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {function.__name__}: *args and **kwargs have no schema")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[name] = (hints.get(name, Any), default)
    arguments = create_model(f"{function.__name__}_arguments", __base__=_Arguments, **fields)
    schema = arguments.model_json_schema()
    schema.pop("title", None)
    description = inspect.getdoc(function) or function.__name__
    definition = ToolDef(function.__name__, description, schema, options, "python")
    return PythonTool(function, definition, arguments)


class PythonTools:
    """The tools of some modules, as a ToolSource."""

    def __init__(self, tools: Iterable[PythonTool]) -> None:
        self.by_name = {item.definition.name: item for item in tools}

    def tools(self) -> list[ToolDef]:
        """Every tool of the modules."""
        return [item.definition for item in self.by_name.values()]

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """Run the tool on checked arguments, bounded by ``timeout_s``; its result as text."""
        item = self.by_name.get(name)
        if item is None:
            raise ToolError(f"no tool {name} here")
        try:
            checked = item.arguments.model_validate(arguments)
        except ValidationError as error:
            raise ToolError(f"bad arguments for {name}: {one_line(error)}") from None
        values = {field: getattr(checked, field) for field in type(checked).model_fields}
        try:
            if inspect.iscoroutinefunction(item.function):
                future = asyncio.run_coroutine_threadsafe(item.function(**values), tool_loop())
                result = future.result(timeout_s)
            else:
                result = _sync_calls.submit(item.function, **values).result(timeout_s)
        except (FutureTimeout, TimeoutError):
            raise TimeoutError(f"{name} outlasted its {timeout_s:g}s") from None
        except ToolError:
            raise
        except Exception as error:  # noqa: BLE001 - a tool's failure is its result
            raise ToolError(f"{type(error).__name__}: {error}") from None
        return as_text(result)


def one_line(error: ValidationError) -> str:
    """A validation error's problems on one line: ``field: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, problem['loc'])) or 'arguments'}: {problem['msg']}"
                     for problem in error.errors())


def as_text(result: Any) -> str:
    """A tool's return value as the text the model reads (JSON unless it is a string)."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return orjson.dumps(result, default=str).decode()


@cache
def tool_loop() -> asyncio.AbstractEventLoop:
    """The event loop async tools run on, on a daemon thread of its own, for the worker's
    whole life."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="python-tools-loop", daemon=True).start()
    return loop


def load_python_tools(modules: Iterable[str]) -> PythonTools:
    """The tools of ``modules`` (import paths); ToolLoadError naming the module that cannot
    be imported or defines no tool, or the name two tools share."""
    found: dict[str, tuple[str, PythonTool]] = {}
    for path in modules:
        try:
            module = importlib.import_module(path)
        except Exception as error:  # noqa: BLE001 - any failure to import is reported alike
            raise ToolLoadError(f"PARLEY_WORKER_TOOLS: cannot import {path}: "
                                f"{type(error).__name__}: {error}") from None
        marked = [getattr(value, MARK) for value in vars(module).values()
                  if isinstance(getattr(value, MARK, None), PythonTool)]
        if not marked:
            raise ToolLoadError(f"PARLEY_WORKER_TOOLS: {path} defines no @parley.tool function")
        for item in marked:
            name = item.definition.name
            if name in found and found[name][1].function is not item.function:
                raise ToolLoadError(f"PARLEY_WORKER_TOOLS: two tools are named {name} "
                                    f"({found[name][0]} and {path})")
            found[name] = (path, item)
    return PythonTools(item for _, item in found.values())
