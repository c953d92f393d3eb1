"""What every tool source gives the tool loop: each tool's definition, and a way to call it.

Tools are the workers' operator's, never a spec's: a spec only names them. A Python module
(``PARLEY_WORKER_TOOLS``) and an MCP server (``PARLEY_WORKER_MCP_CONFIG``) are both a
``ToolSource``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_TOOL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ToolOptions:
    """How a tool is run: whether a person approves each call first, whether running it
    twice is harmless (an ``uncertain`` call then runs again), how long it may take, and
    the Celery queue it runs on when it must run elsewhere (None: on the calling worker)."""

    approval: bool = False
    idempotent: bool = False
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    queue: str | None = None


@dataclass(frozen=True)
class ToolDef:
    """One tool as the catalog and the model see it: its name (``<server>/<tool>`` for an
    MCP server's), what it does, its arguments' JSON schema, and its options."""

    name: str
    description: str
    parameters: dict[str, Any]
    options: ToolOptions = field(default_factory=ToolOptions)
    source: str = "python"  # "python", or "mcp:<server>"


class ToolError(Exception):
    """A tool failed: its message is the result the model is told."""


class ToolSource(Protocol):
    """A set of tools a worker offers."""

    def tools(self) -> list[ToolDef]:
        """Every tool this source offers now."""
        ...

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """The tool's result as text; raises ToolError when it fails, TimeoutError when it
        outlasts ``timeout_s``."""
        ...
