"""The workers' MCP servers as one ToolSource: a session per server, kept open.

One asyncio event loop, in a daemon thread of its own, holds each server's ClientSession
(the ``mcp`` package's client, over stdio or streamable HTTP). A keeper task per server
opens its session at start-up and keeps it: when the server's process exits, its
connection drops or it stops answering pings, the keeper opens a new one, at once when a
call is waiting and otherwise after a backoff. Worker threads call tools through
``call``, which hands the call to that loop; many calls run at once on one session.

A call is sent once and never again: a server that stops while it runs is the call's
error (its result is unknown), and only the next call uses the new session.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
import structlog
from anyio.streams.memory import MemoryObjectSendStream
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from parley.shared.settings import redact_url
from parley.workers.tools.base import ToolDef, ToolError, ToolOptions
from parley.workers.tools.mcp_config import McpConfig, McpServerConfig, read_mcp_config

log = structlog.get_logger("parley.worker")

# How long start-up waits for every server's first session; a server still not up after
# that is offered once it is (its tools are listed then).
STARTUP_WAIT_S = 20.0
# The first session's handshake and tool listing, and each later one's.
CONNECT_TIMEOUT_S = 15.0
# A live session is pinged this often; no answer within PING_TIMEOUT_S is a lost server.
PING_EVERY_S = 10.0
PING_TIMEOUT_S = 5.0
MIN_PING_S = 0.5
# Reconnects back off from the first to the last, doubling; a session that lived as long
# as the last starts the backoff afresh (one that dies at once must not restart a process
# twice a second).
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# An HTTP server's request may take long (a slow tool): the call's own timeout bounds it.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=None)
# Tool names as the MCP specification allows them; others are not offered.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_DESCRIPTION_CHARS = 2000
MAX_STDERR_LINE_CHARS = 1000
# What close() waits for the servers to stop (a stdio server gets SIGTERM, then SIGKILL).
CLOSE_WAIT_S = 10.0


class ServerLink:
    """One server: its config, its session while it has one, the tools it listed last.

    Lives on the servers' event loop; only its keeper task opens and closes the session.
    """

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.session: ClientSession | None = None
        self.tools: dict[str, ToolDef] = {}
        self.last_error = "not connected yet"
        self.connected = asyncio.Event()  # a session is open and answering
        self.lost = asyncio.Event()  # the open session is gone: the keeper opens another
        self.wanted = asyncio.Event()  # a call waits for a session: the shortest backoff
        self.tried = asyncio.Event()  # the first attempt is over, for start-up
        self.opened_at = 0.0
        self.stderr: TextIO | None = None

    async def keep(self) -> None:
        """Open the session, keep it while it lives, open it again when it dies."""
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                await self.serve_session()
                if anyio.current_time() - self.opened_at >= MAX_BACKOFF_S:
                    backoff = FIRST_BACKOFF_S
            except Exception as error:  # anything a transport raises: the server is down
                self.last_error = self.describe(error)
                log.warning("mcp_server_down", server=self.name, error=self.last_error,
                            retry_in_s=backoff)
            finally:
                self.tried.set()
            await self.pause(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def pause(self, backoff_s: float) -> None:
        """Wait ``backoff_s`` before the next attempt, or FIRST_BACKOFF_S once a call is
        waiting (so that calls to a server that dies at once cannot restart it at their
        own rate)."""
        started = anyio.current_time()
        with anyio.move_on_after(backoff_s):
            await self.wanted.wait()
        await anyio.sleep(max(0.0, min(backoff_s, FIRST_BACKOFF_S)
                              - (anyio.current_time() - started)))
        self.wanted.clear()

    async def serve_session(self) -> None:
        """One session, from its handshake until it is lost."""
        async with self.transport() as (read, write):
            watched_send, watched = anyio.create_memory_object_stream[
                SessionMessage | Exception](0)
            async with anyio.create_task_group() as group:
                group.start_soon(self.relay, read, watched_send)
                try:
                    async with ClientSession(watched, write,
                                             message_handler=self.on_message) as session:
                        with anyio.fail_after(CONNECT_TIMEOUT_S):
                            await session.initialize()
                            self.tools = await self.list_tools(session)
                        self.open(session)
                        await self.watch(session)
                finally:
                    self.close_session()
                    group.cancel_scope.cancel()

    @asynccontextmanager
    async def transport(self) -> AsyncIterator[Any]:
        """The server's streams: its process over stdio, or its streamable HTTP endpoint."""
        config = self.config
        if config.command is not None:
            # The process sees only its config's env over the mcp package's safe default
            # (HOME, LOGNAME, PATH, SHELL, TERM, USER): never the worker's keys.
            params = StdioServerParameters(command=config.command, args=config.args,
                                           env=config.env, cwd=config.cwd)
            async with stdio_client(params, errlog=self.stderr_pipe()) as streams:
                yield streams
            return
        assert config.url is not None
        async with httpx2.AsyncClient(headers=config.headers, timeout=HTTP_TIMEOUT) as client, \
                streamable_http_client(config.url, http_client=client) as streams:
            yield streams

    async def relay(self, read: Any, send: MemoryObjectSendStream[SessionMessage | Exception]
                    ) -> None:
        """Pass the server's messages on to the session; their end (a stdio server's
        process exited) is a lost server."""
        async with send:
            try:
                async for item in read:
                    await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
        self.mark_lost("the server closed its connection")

    async def watch(self, session: ClientSession) -> None:
        """Wait until the session is lost: ping it while nothing else says so."""
        while not self.lost.is_set():
            with anyio.move_on_after(PING_EVERY_S):
                await self.lost.wait()
            if not self.lost.is_set() and not await self.answers(session):
                self.mark_lost(f"no answer to a ping within {PING_TIMEOUT_S:g}s")

    async def answers(self, session: ClientSession, within_s: float = PING_TIMEOUT_S) -> bool:
        """Whether the server answers a ping within ``within_s``."""
        try:
            with anyio.fail_after(within_s):
                await session.send_ping()
        except Exception:
            return False
        return True

    async def on_message(self, message: Any) -> None:
        """A server's notification: a changed tool list is listed again."""
        if isinstance(message, types.ToolListChangedNotification) and self.session is not None:
            try:
                with anyio.fail_after(CONNECT_TIMEOUT_S):
                    self.tools = await self.list_tools(self.session)
            except Exception as error:
                log.warning("mcp_tools_not_listed", server=self.name, error=self.describe(error))

    async def list_tools(self, session: ClientSession) -> dict[str, ToolDef]:
        """Every tool the server lists (all pages), as the toolbox offers them."""
        listed: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            page = await session.list_tools(params=params)
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        tools = {}
        for tool in listed:
            if TOOL_NAME.fullmatch(tool.name) is None:
                log.warning("mcp_tool_not_offered", server=self.name,
                            detail="its name is not an MCP tool name")
                continue
            tools[tool.name] = self.tool_def(tool)
        return tools

    def tool_def(self, tool: types.Tool) -> ToolDef:
        """An MCP tool as the toolbox offers it: ``<server>/<tool>``, with the options the
        operator set for it."""
        hinted = bool(tool.annotations and tool.annotations.idempotent_hint)
        options = ToolOptions(approval=self.config.needs_approval(tool.name),
                              idempotent=self.config.is_idempotent(tool.name, hinted),
                              timeout_s=self.config.timeout_s)
        description = (tool.description or tool.title or "")[:MAX_DESCRIPTION_CHARS]
        return ToolDef(name=f"{self.name}/{tool.name}", description=description,
                       parameters=tool.input_schema, options=options,
                       source=f"mcp:{self.name}")

    def open(self, session: ClientSession) -> None:
        """The session is up: calls may use it."""
        self.session = session
        self.opened_at = anyio.current_time()
        self.lost.clear()
        self.connected.set()
        self.tried.set()
        log.info("mcp_server_connected", server=self.name, transport=self.config.transport,
                 tools=len(self.tools))

    def mark_lost(self, reason: str) -> None:
        """The session is gone; calls wait for the next one."""
        if self.session is not None and not self.lost.is_set():
            self.last_error = reason
            log.warning("mcp_server_lost", server=self.name, reason=reason)
        self.connected.clear()
        self.lost.set()

    def stderr_pipe(self) -> TextIO:
        """Where the server's process writes its stderr: a pipe whose lines become this
        worker's log lines (``mcp_server_stderr``), so JSON logs stay JSON. One pipe
        serves every process of the server; it lives as long as the worker."""
        if self.stderr is None:
            read_fd, write_fd = os.pipe()
            self.stderr = os.fdopen(write_fd, "w")
            threading.Thread(target=self.log_stderr, args=(os.fdopen(read_fd, errors="replace"),),
                             name=f"mcp-stderr:{self.name}", daemon=True).start()
        return self.stderr

    def log_stderr(self, lines: TextIO) -> None:
        """Log each line the server's processes write to stderr, cut and without the
        config's secrets."""
        with lines:
            for line in lines:
                if line.strip():
                    log.info("mcp_server_stderr", server=self.name,
                             line=self.redacted(line.rstrip())[:MAX_STDERR_LINE_CHARS])

    def close_session(self) -> None:
        """The session has ended."""
        self.session = None
        self.connected.clear()

    async def live_session(self) -> ClientSession:
        """The open session, or the next one (the keeper is asked to open it now)."""
        while self.session is None or self.lost.is_set():
            self.wanted.set()
            await self.connected.wait()
        return self.session

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """Call ``tool`` once, within ``timeout_s`` (waiting for a session included)."""
        deadline = anyio.current_time() + timeout_s
        session: ClientSession | None = None
        with anyio.move_on_after(timeout_s):
            session = await self.live_session()
        if session is None:
            raise ToolError(f"MCP server {self.name} is down ({self.last_error})")
        if tool not in self.tools:
            raise ToolError(f"MCP server {self.name} offers no tool {tool!r}")
        try:
            with anyio.fail_after(deadline - anyio.current_time()):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            raise TimeoutError(f"{self.name}/{tool} took longer than {timeout_s:g}s") from None
        except Exception as error:
            # The ping that tells a refused call from a lost server fits in the call's time.
            within_s = max(deadline - anyio.current_time(), MIN_PING_S)
            raise await self.failed_call(session, tool, error, within_s) from None
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{self.name}/{tool} failed")
        return text

    async def failed_call(self, session: ClientSession, tool: str, error: Exception,
                          within_s: float) -> ToolError:
        """The error a call that did not come back is told as: a server that went away
        while it ran, or one that refused it (and still answers a ping)."""
        if not (isinstance(error, MCPError) and error.code != types.CONNECTION_CLOSED
                and await self.answers(session, within_s)):
            self.mark_lost(f"it stopped during a call of {tool}")
            return ToolError(f"MCP server {self.name} stopped while {tool} ran: its result "
                             f"is unknown")
        return ToolError(f"MCP server {self.name} refused the call of {tool}: "
                         f"{self.redacted(str(error))}")

    def describe(self, error: BaseException) -> str:
        """An error as a short line, its innermost cause, without the config's secrets."""
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]
        if isinstance(error, MCPError) and error.code == types.CONNECTION_CLOSED:
            return "it closed the connection before it was ready"
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return self.redacted(text)[:300]

    def redacted(self, text: str) -> str:
        """``text`` with the config's env and header values masked, and their words of 8
        characters or more (the token of ``Bearer <token>``)."""
        values = (*self.config.env.values(), *self.config.headers.values())
        words = (word for value in values for word in value.split() if len(word) >= 8)
        for secret in sorted({*values, *words}, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return redact_url(text) if "://" in text else text


def result_text(result: types.CallToolResult) -> str:
    """A tool result's content as text: text blocks joined, other blocks described."""
    parts = [block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    return "\n".join(parts)


def block_text(block: Any) -> str:
    """One content block as text; what is not text is a short placeholder."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.mime_type}, {decoded_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return (f"[{resource.mime_type or 'application/octet-stream'} {resource.uri}, "
                f"{decoded_size(resource.blob)} bytes]")
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def decoded_size(data: str) -> int:
    """The size in bytes of base64 ``data``."""
    try:
        return len(base64.b64decode(data))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


class McpServers:
    """Every MCP server of the worker's config, as one ToolSource."""

    def __init__(self, config: McpConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-servers",
                                       daemon=True)
        self.links = {name: ServerLink(name, server) for name, server in config.servers.items()}
        self.keepers: list[asyncio.Task[None]] = []

    def start(self, wait_s: float = STARTUP_WAIT_S) -> None:
        """Open every server's session; wait up to ``wait_s`` for each to be up or down."""
        self.thread.start()
        self.run(self.start_keepers(), CLOSE_WAIT_S)
        try:
            self.run(self.first_tries(), wait_s)
        except TimeoutError:
            pending = [name for name, link in self.links.items() if not link.tried.is_set()]
            log.warning("mcp_servers_still_starting", servers=pending)

    async def start_keepers(self) -> None:
        """A keeper task per server, on the servers' loop."""
        self.keepers = [asyncio.create_task(link.keep(), name=f"mcp:{name}")
                        for name, link in self.links.items()]

    async def first_tries(self) -> None:
        """Until every server's first session is open or has failed."""
        for link in self.links.values():
            await link.tried.wait()

    def tools(self) -> list[ToolDef]:
        """Every tool of every server, as each listed them last (a server reconnecting
        keeps its tools; one never reached has none yet)."""
        return [tool for link in self.links.values() for tool in list(link.tools.values())]

    def up(self) -> dict[str, bool]:
        """Which servers have a live session now."""
        return {name: link.connected.is_set() for name, link in self.links.items()}

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """Call the tool ``<server>/<tool>`` from any thread; ToolError when it fails or its
        server is down, TimeoutError when it outlasts ``timeout_s``."""
        server, _, tool = name.partition("/")
        link = self.links.get(server)
        if link is None or not tool:
            raise ToolError(f"no MCP server offers {name!r}")
        # The call keeps to timeout_s; past it, at most the ping that tells why it failed.
        return self.run(link.call(tool, arguments, timeout_s), timeout_s + MIN_PING_S + 1.0)

    def run(self, coroutine: Any, timeout_s: float) -> Any:
        """Run ``coroutine`` on the servers' loop and wait for it (at most ``timeout_s``)."""
        if self.loop.is_closed() or not self.thread.is_alive():
            coroutine.close()
            raise ToolError("the MCP servers are stopped")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:  # concurrent.futures' own is the builtin: it may be the call's
            if future.done():
                raise
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """End every session and stop the servers' processes (worker shutdown)."""
        if not self.thread.is_alive():
            return
        try:
            self.run(self.stop_keepers(), wait_s)
        except (TimeoutError, ToolError):
            log.warning("mcp_servers_not_stopped", wait_s=wait_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(wait_s)
        for link in self.links.values():
            if link.stderr is not None:
                link.stderr.close()  # its reader ends once the stopped processes' ends close

    async def stop_keepers(self) -> None:
        """Cancel the keepers: each ends its session and stops its server."""
        for keeper in self.keepers:
            keeper.cancel()
        await asyncio.gather(*self.keepers, return_exceptions=True)


def load_mcp_servers(path: str | Path, wait_s: float = STARTUP_WAIT_S) -> McpServers | None:
    """The worker's MCP servers from the file at ``path``, their sessions open (None for
    an empty path). Raises McpConfigError, one line, for a file that cannot be used."""
    if not str(path):
        return None
    servers = McpServers(read_mcp_config(path))
    servers.start(wait_s)
    return servers
