"""The demo says which Redis it uses, points at a dashboard only when one answers its
health check, and never waits long for one that is not there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from parley.cli.demo import dashboard_url, private_redis_line, shared_redis_line
from parley.processes import free_port


class Health(BaseHTTPRequestHandler):
    """Answers /healthz as ``parley api`` does when Redis answers; 404 elsewhere."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_dashboard_that_answers_is_pointed_at(api_port):
    settings = SimpleNamespace(api_host="0.0.0.0", api_port=api_port)
    assert dashboard_url(settings) == f"http://127.0.0.1:{api_port}/"  # type: ignore[arg-type]


def test_no_dashboard_is_said_nothing_of_at_once():
    settings = SimpleNamespace(api_host="127.0.0.1", api_port=free_port())
    started = time.monotonic()
    assert dashboard_url(settings) is None  # type: ignore[arg-type]
    assert time.monotonic() - started < 2


def test_the_demo_names_the_redis_it_uses_without_its_password():
    url = "redis://:hunter2@redis.internal:6380/0"
    assert shared_redis_line(url) == (
        "using Redis at redis://:***@redis.internal:6380/0 (PARLEY_REDIS_URL)")
    assert private_redis_line(url, 41234) == (
        "no Redis answers at redis://:***@redis.internal:6380/0 (PARLEY_REDIS_URL): started a "
        "private redis-server on 127.0.0.1:41234, stopped at the end")
