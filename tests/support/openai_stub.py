"""A tiny OpenAI-compatible chat completions server for tests, on 127.0.0.1.

Each model name has its own script: a queue of replies, one per request, so an agent whose
``model`` is ``openai/<name>`` and whose ``api_base`` is the stub's URL gets exactly the
replies the test scripted, through litellm's real HTTP client and response parsing. A
model whose script has run out answers with the ``default`` reply.

    with OpenAIStub(api_key="sk-test") as stub:
        stub.script("alice", tool_call(0.8, "hello"), error(429), text("prose"))
        ... agents with model "openai/alice" and api_base stub.url ...
        stub.received   # every chat completion request the stub answered, in order
        stub.seen       # every HTTP request at all, any path, with its headers and raw body

An error reply whose message contains ``{authorization}`` echoes the request's Authorization
header there, as a careless provider might.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a completion (tool call or text) or an HTTP error."""

    status: int = 200
    arguments: str | None = None  # the respond call's arguments, as the model wrote them
    content: str | None = None  # plain text instead of a tool call
    error_message: str = ""
    error_type: str = ""
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 0  # 0: the stub estimates from the request
    completion_tokens: int = 0
    delay_s: float = 0.0
    cached_tokens: int | None = None  # None: what the stub's prefix cache holds (or 0)
    token_s: float = 0.0  # the time each completion token takes to write
    fail_after: int | None = None  # a stream cut off (connection dropped) after this many chunks
    stall_after: int | None = None  # a stream that stops sending after this many chunks
    tool_calls: tuple[tuple[str, str], ...] = ()  # (function name, arguments) the model asks for


def tool_call(score: Any, message: Any, **options: Any) -> Reply:
    """A completion whose one tool call is respond(score, message)."""
    return Reply(arguments=json.dumps({"score": score, "message": message}), **options)


def asks_tools(*calls: tuple[str, dict[str, Any]], **options: Any) -> Reply:
    """A completion asking for the agent's tool calls ``(name, arguments)``, several at
    once when given several; the request after it reads their results."""
    return Reply(tool_calls=tuple((name, json.dumps(arguments)) for name, arguments in calls),
                 **options)


def tool_messages(received: Received) -> list[dict[str, Any]]:
    """The tool results a request carried back to the model, in order."""
    return [message for message in received.body.get("messages", [])
            if message.get("role") == "tool"]


def raw_arguments(arguments: str, **options: Any) -> Reply:
    """A completion whose respond call carries exactly ``arguments``."""
    return Reply(arguments=arguments, **options)


def text(content: str, **options: Any) -> Reply:
    """A completion with plain text and no tool call."""
    return Reply(content=content, **options)


def error(status: int, message: str = "", error_type: str = "", code: str | None = None,
          **options: Any) -> Reply:
    """An HTTP error with an OpenAI-style error body."""
    return Reply(status=status, error_message=message or HTTPStatus(status).phrase,
                 error_type=error_type or "server_error", error_code=code, **options)


def rate_limited(retry_after_s: float = 0.1) -> Reply:
    """A 429 asking the client to come back after ``retry_after_s``."""
    return error(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded",
                 headers={"retry-after": f"{retry_after_s:g}"})


def model_not_found(name: str) -> Reply:
    """The 404 OpenAI answers for a model name it does not serve."""
    return error(404, f"The model `{name}` does not exist or you do not have access to it.",
                 "invalid_request_error", "model_not_found")


@dataclass(frozen=True)
class Seen:
    """One HTTP request as it arrived: method, path, every header, the raw body."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def carries(self, secret: str) -> bool:
        """True when ``secret`` appears anywhere in the request: path, a header's name or
        value, or the body (raw, so a JSON-escaped copy counts too)."""
        text = [self.path, *(part for header in self.headers for part in header)]
        return any(secret in item for item in text) or secret.encode() in self.body


@dataclass
class Received:
    """One request the stub answered."""

    model: str
    body: dict[str, Any]
    authorization: str
    reply: Reply


class OpenAIStub:
    """The server: scripts per model, every request recorded; start/stop or use ``with``."""

    def __init__(self, api_key: str | None = None, default: Reply | None = None,
                 refusal: Reply | None = None, prefix_cache: bool = False,
                 keep_alive: bool = False) -> None:
        self.api_key = api_key
        # With prefix_cache, a request's prompt tokens that an earlier request of the same
        # model began with count as cached, as providers' automatic prompt caches do.
        self.prefix_cache = prefix_cache
        self.prompts: dict[str, list[str]] = {}
        # HTTP/1.1 connections kept open between requests, as a provider's are (the default
        # closes each one: no client can keep a connection a test did not mean to keep).
        self.keep_alive = keep_alive
        self.default = default or tool_call(0.0, "")
        # The answer to a request without ``api_key``.
        self.refusal = refusal or error(401, "Incorrect API key provided.",
                                        "invalid_request_error", "invalid_api_key")
        self.scripts: dict[str, deque[Reply]] = {}
        self.received: list[Received] = []
        self.seen: list[Seen] = []
        self.connections: set[tuple[str, int]] = set()  # the clients' (host, port), as seen
        # Requests being answered now, and the most at once (benchmarks/worker_calls.py).
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> OpenAIStub:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The api_base to give agents."""
        assert self.server is not None, "the stub is not running"
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, model: str, *replies: Reply) -> None:
        """Queue replies for requests naming ``model`` (without the ``openai/`` prefix)."""
        with self.lock:
            self.scripts.setdefault(model, deque()).extend(replies)

    def requests_for(self, model: str) -> list[Received]:
        """The requests that named ``model``, in arrival order."""
        with self.lock:
            return [item for item in self.received if item.model == model]

    def requests_carrying(self, secret: str) -> list[Seen]:
        """Every request, to any path, that carried ``secret`` anywhere."""
        with self.lock:
            return [item for item in self.seen if item.carries(secret)]

    def record(self, seen: Seen) -> None:
        """Keep one arriving request."""
        with self.lock:
            self.seen.append(seen)

    def start(self) -> None:
        """Listen on a free port of 127.0.0.1 and serve from a background thread."""
        self.stopping.clear()
        self.server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True,
                                       name="openai-stub")
        self.thread.start()

    def stop(self) -> None:
        """Stop serving, cut short any delayed reply, close the socket and join every
        thread the server started."""
        if self.server is None:
            return
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.server = None
        self.thread = None

    def hold(self, seconds: float) -> None:
        """Wait before a reply (cut short by stop()), counted as in flight."""
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.stopping.wait(seconds)
        finally:
            with self.lock:
                self.in_flight -= 1

    def answer(self, body: dict[str, Any], authorization: str) -> Reply:
        """The reply for one request: the refusal (401) on a wrong key, else the model's
        next reply."""
        model = str(body.get("model", ""))
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            reply = self.refusal
        else:
            with self.lock:
                queue = self.scripts.get(model)
                reply = queue.popleft() if queue else self.default
        if "{authorization}" in reply.error_message:
            reply = replace(reply, error_message=reply.error_message.replace(
                "{authorization}", authorization))
        with self.lock:
            self.received.append(Received(model, body, authorization, reply))
            if reply.cached_tokens is None and self.prefix_cache:
                reply = replace(reply, cached_tokens=self.cached_prefix(model, body))
        return reply

    def cached_prefix(self, model: str, body: dict[str, Any]) -> int:
        """Tokens of the request's prompt that an earlier prompt of ``model`` began with
        (whole messages only, as a provider's cache blocks are), and keep this prompt."""
        messages = [json.dumps(message, sort_keys=True) for message in body.get("messages", [])]
        best = 0
        for earlier in self.prompts.get(model, []):
            common = 0
            for mine, theirs in zip(messages, earlier, strict=False):
                if mine != theirs:
                    break
                common += 1
            best = max(best, common)
        self.prompts.setdefault(model, []).append(messages)
        return estimate_tokens("".join(messages[:best])) if best else 0


class _QuietServer(ThreadingHTTPServer):
    """Serves each request on its own thread, all joined on close; a client that hung up
    before its (delayed) reply is expected in timeout tests, not an error to print."""

    daemon_threads = False
    block_on_close = True
    # Thousands of clients connect at once in the worker benchmark (socketserver's is 5).
    request_queue_size = 4096

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """Answers POST .../chat/completions from the stub's scripts."""

        protocol_version = "HTTP/1.1" if stub.keep_alive else "HTTP/1.0"
        # A kept connection left idle this long is closed, so that stop() can join it.
        timeout = 1.0 if stub.keep_alive else None
        # Headers and body go out as two writes: without this, on a kept connection the
        # body waits for the client's delayed ACK (about 40 ms).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._arrived(b"")
            self._send(404, {"error": {"message": f"no route {self.path}"}}, {})

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self._read_body()
            self._arrived(raw)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}}, {})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "the body is not JSON"}}, {})
                return
            reply = stub.answer(body, self.headers.get("authorization", ""))
            if reply.delay_s:
                stub.hold(reply.delay_s)
            if reply.status == 200 and body.get("stream"):
                self._stream(body, reply)
                return
            if reply.status == 200 and reply.token_s:
                stub.stopping.wait(reply.token_s * completion_tokens(reply))
            if reply.status != 200:
                payload = {"error": {"message": reply.error_message, "type": reply.error_type,
                                     "param": None, "code": reply.error_code}}
            else:
                payload = completion(body, reply)
            self._send(reply.status, payload, reply.headers)

        def _stream(self, body: dict[str, Any], reply: Reply) -> None:
            """Server-sent events as OpenAI streams them: the reply a token or so a chunk,
            ``token_s`` apart, then the usage chunk (when asked for) and [DONE]; or, with
            ``fail_after``, the connection dropped after that many chunks, or with
            ``stall_after``, nothing more sent after that many until the stub stops."""
            whole = completion(body, reply)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            base = {key: whole[key] for key in ("id", "created", "model")}
            base["object"] = "chat.completion.chunk"
            pieces = stream_pieces(reply)
            started = time.monotonic()
            for index, delta in enumerate(pieces):
                if reply.fail_after is not None and index >= reply.fail_after:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if reply.stall_after is not None and index >= reply.stall_after:
                    stub.stopping.wait()  # the connection stays open, silent
                    return
                # Paced from the start, as a provider writes: a late wake-up is not repeated.
                due = started + (index + 1) * reply.token_s
                if reply.token_s and stub.stopping.wait(max(0.0, due - time.monotonic())):
                    return
                self._event({**base, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": None}]})
            self._event({**base, "choices": [{"index": 0, "delta": {},
                                              "finish_reason": whole["choices"][0]["finish_reason"]}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                self._event({**base, "choices": [], "usage": whole["usage"]})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _event(self, payload: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            self.wfile.flush()

        def _read_body(self) -> bytes:
            if "chunked" not in self.headers.get("transfer-encoding", "").lower():
                return self.rfile.read(int(self.headers.get("content-length") or 0))
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)

        def _arrived(self, raw: bytes) -> None:
            stub.record(Seen(self.command, self.path, tuple(self.headers.items()), raw))
            with stub.lock:
                stub.connections.add(self.client_address[:2])

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if not stub.keep_alive:
                self.send_header("connection", "close")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            """Quiet: tests assert on ``stub.received`` instead."""

    return Handler


def completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The chat.completion object for a successful reply."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.arguments is not None:
        message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                  "function": {"name": "respond", "arguments": reply.arguments}}]
    if reply.tool_calls:
        message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                  "function": {"name": name, "arguments": arguments}}
                                 for name, arguments in reply.tool_calls]
    prompt_tokens = reply.prompt_tokens or estimate_tokens(json.dumps(body.get("messages", [])))
    written = completion_tokens(reply)
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": written,
                             "total_tokens": prompt_tokens + written}
    if reply.cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": min(reply.cached_tokens,
                                                               prompt_tokens)}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": usage,
    }


def completion_tokens(reply: Reply) -> int:
    """The completion tokens a reply reports: as scripted, else estimated from its text."""
    return reply.completion_tokens or estimate_tokens(reply.arguments or reply.content or "")


def stream_pieces(reply: Reply) -> list[dict[str, Any]]:
    """A reply's deltas: its content as one piece per completion token (the text cut
    evenly), or its tool call whole."""
    if reply.arguments is not None:
        call = {"index": 0, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": "respond", "arguments": reply.arguments}}
        return [{"role": "assistant", "tool_calls": [call]}]
    content = reply.content or ""
    count = max(1, min(completion_tokens(reply), len(content)))
    size = -(-len(content) // count)  # ceiling: at most ``count`` pieces
    pieces = [content[i:i + size] for i in range(0, len(content), size)] or [""]
    return [{"role": "assistant", "content": pieces[0]},
            *({"content": piece} for piece in pieces[1:])]


def estimate_tokens(text_: str) -> int:
    """About four characters a token, never zero."""
    return max(1, len(text_) // 4)
