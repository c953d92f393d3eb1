"""An OpenAI-compatible server, in its own process, that holds every chat completion for a
while and counts how many it holds at once.

tests/support/openai_stub.py starts a thread and records every request, which costs about
1 ms of CPU each: holding thousands of calls it fell behind the worker it measured (the
worker idle, every call sent, the stub still reading them). This one is an asyncio loop
that only reads, waits and answers: its count is the worker's, not its own.

    python -m benchmarks.hold_server --after 2 --api-key sk-bench
    # prints its URL; GET /held answers {"in_flight": n, "most_in_flight": n, "answered": n,
    #                                    "arrived": [each held request's arrival, in s]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
from http import HTTPStatus
from types import TracebackType
from typing import Any

from tests.support.openai_stub import completion, tool_call


class Held:
    """The server's counts."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most_in_flight = 0
        self.answered = 0
        self.arrived: list[float] = []  # the loop's clock when each held request came


async def serve(after_s: float, api_key: str) -> None:
    held = Held()
    reply = tool_call(0.8, "A stub answer.")
    refusal = json.dumps({"error": {"message": "Incorrect API key provided",
                                    "type": "invalid_request_error"}}).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                headers = {name.lower(): value for name, _, value in
                           (line.partition(": ") for line in lines[1:])}
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                if lines[0].startswith("GET /held"):
                    status, data = 200, json.dumps(vars(held)).encode()
                elif headers.get("authorization") != f"Bearer {api_key}":
                    status, data = 401, refusal
                else:
                    held.arrived.append(asyncio.get_running_loop().time())
                    held.in_flight += 1
                    held.most_in_flight = max(held.most_in_flight, held.in_flight)
                    try:
                        await asyncio.sleep(after_s)
                    finally:
                        held.in_flight -= 1
                    status, data = 200, json.dumps(completion(json.loads(raw), reply)).encode()
                    held.answered += 1
                writer.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s"
                             % (status, HTTPStatus(status).phrase.encode(), len(data), data))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client hung up
        finally:
            writer.close()

    listener = socket.create_server(("127.0.0.1", 0), backlog=8192)
    server = await asyncio.start_server(answer, sock=listener)
    print(f"http://127.0.0.1:{listener.getsockname()[1]}/v1", flush=True)
    async with server:
        await server.serve_forever()


class HoldServer:
    """The server as a child process, stopped by its PID on exit."""

    def __init__(self, after_s: float, api_key: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.hold_server", "--after", str(after_s),
             "--api-key", api_key], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url:
            self.close()
            raise RuntimeError("the hold server did not start")

    def held(self) -> dict[str, Any]:
        """Its counts so far."""
        import httpx

        return httpx.get(self.url.removesuffix("/v1") + "/held", timeout=10).json()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def __enter__(self) -> HoldServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after", type=float, default=2.0, help="seconds before an answer")
    parser.add_argument("--api-key", default="sk-bench")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.after, args.api_key))


if __name__ == "__main__":
    main()
