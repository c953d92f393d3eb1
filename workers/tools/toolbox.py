"""Every tool a worker offers, from all its sources, by name: what an agent's ``tools`` list
resolves to, and the one way the tool loop calls a tool."""

from __future__ import annotations

from collections.abc import Iterable
from threading import Lock
from typing import Any

from parley.shared.settings import Settings
from parley.workers.tools.base import ToolDef, ToolError, ToolSource
from parley.workers.tools.python_tools import load_python_tools

# ``<server>/*`` in an agent's tools names every tool of that server.
ALL_OF = "/*"


class ToolUnavailable(LookupError):
    """An agent names a tool this worker does not offer."""

    def __init__(self, name: str) -> None:
        super().__init__(f"tool {name} is not offered by this worker (see parley tools)")
        self.name = name


class Toolbox:
    """The tools of ``sources``, by name (the first source offering a name keeps it)."""

    def __init__(self, sources: Iterable[ToolSource] = ()) -> None:
        self.sources = list(sources)

    @property
    def offered(self) -> dict[str, tuple[ToolDef, ToolSource]]:
        """Each tool offered now, with its source: read again each time, as an MCP server
        reached late (or whose tools changed) offers what it lists now."""
        offered: dict[str, tuple[ToolDef, ToolSource]] = {}
        for source in self.sources:
            for definition in source.tools():
                offered.setdefault(definition.name, (definition, source))
        return offered

    def close(self) -> None:
        """End the sources' sessions (an MCP server's process with its own)."""
        for source in self.sources:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def tools(self) -> list[ToolDef]:
        """Every tool offered, in the sources' order."""
        return [definition for definition, _ in self.offered.values()]

    def get(self, name: str) -> ToolDef | None:
        """The tool called ``name``, or None."""
        found = self.offered.get(name)
        return found[0] if found else None

    def resolve(self, names: Iterable[str]) -> list[ToolDef]:
        """The tools an agent's ``tools`` list names, in its order, once each
        (``server/*``: all of that server's); ToolUnavailable for the first not offered."""
        resolved: dict[str, ToolDef] = {}
        for name in names:
            if name.endswith(ALL_OF):
                server = name[:-len(ALL_OF)]
                matched = [tool for tool in self.tools()
                           if tool.name.startswith(f"{server}/")]
                if not matched:
                    raise ToolUnavailable(name)
                resolved.update((tool.name, tool) for tool in matched)
                continue
            tool = self.get(name)
            if tool is None:
                raise ToolUnavailable(name)
            resolved[name] = tool
        return list(resolved.values())

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """The tool's result; ToolError when it fails or is not offered, TimeoutError when
        it outlasts ``timeout_s``."""
        found = self.offered.get(name)
        if found is None:
            raise ToolError(f"tool {name} is not offered by this worker")
        return found[1].call(name, arguments, timeout_s)


def tool_sources(settings: Settings) -> list[ToolSource]:
    """The worker's tool sources, as its settings name them. Every source is listed here."""
    sources: list[ToolSource] = []
    if settings.worker_tools:
        sources.append(load_python_tools(settings.worker_tools))
    if settings.worker_mcp_config:
        # Put off: the mcp client is loaded only by a worker that has servers.
        from parley.workers.tools.mcp_servers import load_mcp_servers

        servers = load_mcp_servers(settings.worker_mcp_config)
        if servers is not None:
            sources.append(servers)
    return sources


# By the settings' identity (settings are not hashable), each kept beside its toolbox.
_built: dict[int, tuple[Settings, Toolbox]] = {}
_building = Lock()


def build_toolbox(settings: Settings) -> Toolbox:
    """The worker's toolbox for ``settings``, built once per process (its sources' sessions
    stay open); ToolLoadError when a source cannot be offered."""
    with _building:
        if id(settings) not in _built:
            _built[id(settings)] = (settings, Toolbox(tool_sources(settings)))
        return _built[id(settings)][1]
