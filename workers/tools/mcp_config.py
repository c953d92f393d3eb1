"""The workers' MCP servers file (``PARLEY_WORKER_MCP_CONFIG``): read and checked at
start-up, before any server is started.

The usual form, one entry per server::

    {"mcpServers": {
        "grafana": {"command": "mcp-grafana", "args": ["-t", "stdio"],
                    "env": {"GRAFANA_URL": "http://grafana:3000"}},
        "github": {"url": "https://mcp.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${GITHUB_MCP_TOKEN}"},
                   "approval": ["create_issue"], "timeout_s": 60}}}

A server is started as a process (``command``, ``args``, ``env``, ``cwd``: stdio) or reached
over streamable HTTP (``url``, ``headers``); ``${NAME}`` in an env or header value is the
worker's variable NAME, and only the variables so named reach a server. parley's own
options per server: ``approval`` (true, or the tool names that wait for a person),
``idempotent`` (true, false, or tool names; unset, a tool the server marks
``idempotentHint`` counts too) and ``timeout_s``. A file that cannot be read is one line
naming it and what is wrong; values are never repeated in it (an env value or a header
may be a secret).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from parley.workers.tools.base import DEFAULT_TOOL_TIMEOUT_S

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# ${NAME} in an env or header value: the worker's variable NAME, so that secrets can stay
# out of the file.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_TOOL_TIMEOUT_S = 3600.0


class McpConfigError(ValueError):
    """The MCP servers file cannot be used: its message is the one line the worker says
    before it refuses to start."""


class McpServerConfig(BaseModel):
    """One server: a process spoken to over stdio, or a streamable HTTP endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # "type" as other MCP clients' files spell it; it must agree with command / url.
    type: Literal["stdio", "http", "streamable-http"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    # Never in a repr or a log line: values may be secrets.
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    approval: bool | list[str] = False
    idempotent: bool | list[str] | None = None
    timeout_s: float = Field(default=DEFAULT_TOOL_TIMEOUT_S, gt=0, le=MAX_TOOL_TIMEOUT_S)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (a stdio server) or url (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for a stdio server (command), not a url")
        if self.command is not None and self.headers:
            raise ValueError("headers are for a streamable HTTP server (url), not a command")
        if self.type is not None and (self.type == "stdio") != (self.command is not None):
            raise ValueError(f"type {self.type} does not match "
                             f"{'command' if self.command else 'url'}")
        return self

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def needs_approval(self, tool: str) -> bool:
        """Whether the operator made a person approve each call of ``tool``."""
        return self.approval if isinstance(self.approval, bool) else tool in self.approval

    def is_idempotent(self, tool: str, hinted: bool) -> bool:
        """Whether ``tool`` may run again after a call whose result was lost; ``hinted``:
        the server marks it idempotent, which counts unless the operator said otherwise."""
        if isinstance(self.idempotent, bool):
            return self.idempotent
        return hinted or (self.idempotent is not None and tool in self.idempotent)


class McpConfig(BaseModel):
    """The whole file: every server by its name (which prefixes its tools' names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[str, McpServerConfig] = Field(alias="mcpServers")

    @model_validator(mode="after")
    def _names(self) -> McpConfig:
        for name in self.servers:
            if SERVER_NAME.fullmatch(name) is None:
                raise ValueError(f"server name {name!r} may hold only letters, digits, '_' "
                                 f"and '-' (1 to 64)")
        return self


def read_mcp_config(path: str | Path) -> McpConfig:
    """The MCP servers file at ``path``, checked: every problem raises McpConfigError
    with one line naming the file."""
    where = f"PARLEY_WORKER_MCP_CONFIG={path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise McpConfigError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise McpConfigError(f"{where}: cannot be read ({type(error).__name__}: "
                             f"{getattr(error, 'strerror', None) or error})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise McpConfigError(f"{where}: not JSON ({error.msg} at line {error.lineno} "
                             f"column {error.colno})") from None
    if not isinstance(raw, dict):
        raise McpConfigError(f'{where}: not an object of the form {{"mcpServers": {{...}}}}')
    try:
        config = McpConfig.model_validate(raw)
    except ValidationError as error:
        raise McpConfigError(f"{where}: {describe_problems(error)}") from None
    servers = {name: with_references(where, name, server) for name, server in
               config.servers.items()}
    for name, server in servers.items():
        check_command(where, name, server)
    return config.model_copy(update={"servers": servers})


def describe_problems(error: ValidationError) -> str:
    """Each problem as ``mcpServers.<name>.<field>: rule``, without the values (a header
    or an env value may be a secret)."""
    problems = []
    for item in error.errors():
        loc = ".".join(str(part) for part in item["loc"] if not _is_branch(part))
        message = ("unknown field" if item["type"] == "extra_forbidden"
                   else item["msg"].removeprefix("Value error, "))
        problems.append(f"{loc}: {message}" if loc else message)
    return "; ".join(dict.fromkeys(problems))


def _is_branch(part: object) -> bool:
    # pydantic names the union member it tried ("bool", "list[str]") in a location.
    return part in {"bool", "list[str]", "str"}


def with_references(where: str, name: str, server: McpServerConfig) -> McpServerConfig:
    """``server`` with each ``${NAME}`` in its env and header values replaced by the
    worker's variable NAME; one that is not set is refused (named, never its value)."""
    update = {}
    for field in ("env", "headers"):
        values: dict[str, str] = getattr(server, field)
        update[field] = {key: expand(value, f"{where}: mcpServers.{name}.{field}.{key}")
                         for key, value in values.items()}
    return server.model_copy(update=update)


def expand(value: str, place: str) -> str:
    """``value`` with its ``${NAME}`` references replaced; ``place`` names it in a refusal."""
    for variable in REFERENCE.findall(value):
        if variable not in os.environ:
            raise McpConfigError(f"{place}: ${{{variable}}} is not set in the worker's "
                                 f"environment")
    return REFERENCE.sub(lambda found: os.environ[found[1]], value)


def check_command(where: str, name: str, server: McpServerConfig) -> None:
    """A stdio server's command must be found as its process would look for it: on the
    PATH of the environment it is started with."""
    if server.command is None:
        return
    command = server.command
    if os.sep in command and server.cwd is not None:  # a relative path starts from its cwd
        command = str(Path(server.cwd, command))
    path = server.env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(command, path=path) is None:
        raise McpConfigError(f"{where}: mcpServers.{name}.command: {server.command!r} is not "
                             f"an executable on the server's PATH")
