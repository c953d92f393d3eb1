"""A small MCP server for tests, written with the ``mcp`` package's MCPServer.

    python -m tests.support.mcp_server --stdio        # over stdin/stdout
    python -m tests.support.mcp_server --http PORT    # streamable HTTP on 127.0.0.1:PORT/mcp

Tools: ``query(expr)`` echoes its expression, ``slow(seconds)`` sleeps first (once it has
written ``MCP_TEST_STARTED_FILE``), ``fail(reason)`` raises, ``count()`` appends a line to
the file named by ``MCP_TEST_RUNS_FILE`` (so a test can count the runs), ``complain(text)``
writes to stderr, ``environment()`` lists the names of the variables the server sees,
``picture()`` returns an image, and ``lookup(key)`` is marked idempotent. With
``MCP_TEST_PID_FILE`` set the server writes its pid there once it serves, so a test can kill
it by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import ToolAnnotations

server = MCPServer("parley-test", log_level="WARNING")


@server.tool()
def query(expr: str) -> str:
    """Evaluate a metrics expression (echoes it)."""
    return f"result of {expr}"


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after ``seconds``."""
    if started := os.environ.get("MCP_TEST_STARTED_FILE"):
        Path(started).write_text("slow")
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}s"


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with ``reason`` (a tool error: the client is told it)."""
    raise ToolError(reason)


@server.tool()
def count() -> str:
    """Record one run in the runs file."""
    runs = Path(os.environ["MCP_TEST_RUNS_FILE"])
    with runs.open("a") as file:
        file.write("run\n")
    return f"run {len(runs.read_text().splitlines())}"


@server.tool()
def complain(text: str) -> str:
    """Write ``text`` to stderr."""
    print(text, file=sys.stderr, flush=True)
    return "said"


@server.tool()
def environment() -> str:
    """The names of the environment variables this server sees, one per line."""
    return "\n".join(sorted(os.environ))


@server.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=base64.b64decode(PIXEL), format="png")


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def lookup(key: str) -> str:
    """Look ``key`` up (harmless to repeat)."""
    return f"value of {key}"


# A 1x1 transparent PNG.
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVO"
         "RK5CYII=")


def note_pid() -> None:
    """Write this process's pid where the test asked for it."""
    if pid_file := os.environ.get("MCP_TEST_PID_FILE"):
        Path(pid_file).write_text(str(os.getpid()))


def main() -> None:
    """Serve over stdio or streamable HTTP, as the command line says."""
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true")
    mode.add_argument("--http", type=int, metavar="PORT")
    options = parser.parse_args()
    note_pid()
    if options.stdio:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.http)


if __name__ == "__main__":
    main()
