"""JSON mode: parley's events and every library's records (Celery, uvicorn, litellm,
warnings) come out as one JSON object a line, through one handler."""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
import threading
import warnings

import pytest
import structlog

from parley.shared.logs import HANDLER_MARK, configure_logging, log_uncaught, route_to_root
from tests.support.polling import wait_until


@pytest.fixture
def json_lines(monkeypatch):
    """Configure JSON logging onto a stderr of the test's own; returns a reader of its
    lines, each parsed (a line that is not JSON fails the test)."""
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    root_level = logging.getLogger().level
    configure_logging("json", "INFO", "WARNING")

    def read() -> list[dict]:
        return [json.loads(line) for line in stderr.getvalue().splitlines()]

    yield read
    logging.getLogger().setLevel(root_level)
    logging.captureWarnings(False)
    sys.excepthook = sys.__excepthook__


def test_parley_events_carry_their_level_logger_time_and_context(json_lines):
    with structlog.contextvars.bound_contextvars(room="r1", turn=3):
        structlog.get_logger("parley.turn").info("turn_committed", speaker="a")

    [line] = json_lines()
    assert line["event"] == "turn_committed"
    assert (line["level"], line["logger"], line["room"], line["turn"]) == (
        "info", "parley.turn", "r1", 3)
    assert line["speaker"] == "a" and line["timestamp"].endswith("Z")


def test_celery_and_uvicorn_records_become_json_lines_with_their_message(json_lines):
    logging.getLogger("celery.worker.consumer").error(
        "consumer: Cannot connect to %s: %s.\nTrying again in 1.00 seconds...", "redis://x",
        "refused")
    logging.getLogger("uvicorn.access").warning('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000",
                                                "GET", "/rooms", "1.1", 200)

    celery_line, access_line = json_lines()
    assert celery_line["logger"] == "celery.worker.consumer"
    assert celery_line["event"].startswith("consumer: Cannot connect to redis://x: refused.\n")
    assert (access_line["logger"], access_line["level"]) == ("uvicorn.access", "warning")
    assert access_line["event"] == '127.0.0.1:5000 - "GET /rooms HTTP/1.1" 200'


def test_libraries_log_at_their_own_level_and_parley_at_its_own(json_lines):
    logging.getLogger("kombu").info("connected")
    structlog.get_logger("parley.worker").info("bid_request_expired")
    structlog.get_logger("parley.worker").debug("not shown")

    assert [line["event"] for line in json_lines()] == ["bid_request_expired"]


def test_warnings_and_exceptions_are_json_lines(json_lines):
    warnings.warn("careful", UserWarning, stacklevel=1)
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        structlog.get_logger("parley.coordinator").exception("room_take_failed")
    error = RuntimeError("nobody caught this")
    log_uncaught(RuntimeError, error, None)

    warned, failed, uncaught = json_lines()
    assert warned["logger"] == "py.warnings" and "careful" in warned["event"]
    assert "ZeroDivisionError: division by zero" in failed["exception"]
    assert (uncaught["event"], uncaught["level"]) == ("uncaught_exception", "critical")
    assert "nobody caught this" in uncaught["exception"]


def test_a_library_with_its_own_handler_is_routed_through_parleys_keeping_its_filters(
        json_lines):
    library = logging.getLogger("test.own-handler")
    own = logging.StreamHandler(sys.stderr)
    own.addFilter(lambda record: setattr(record, "msg", "redacted") or True)
    library.addHandler(own)
    library.propagate = False

    route_to_root("test.own-handler")
    library.warning("sk-secret")

    assert [(line["logger"], line["event"]) for line in json_lines()] == [
        ("test.own-handler", "redacted")]


def test_configuring_twice_replaces_the_handler(json_lines):
    configure_logging("json", "INFO", "WARNING")

    assert len([h for h in logging.getLogger().handlers if getattr(h, HANDLER_MARK, False)]) == 1


def test_uvicorn_started_with_log_config_none_logs_json_lines(json_lines):
    uvicorn = pytest.importorskip("uvicorn")

    async def app(scope, receive, send) -> None:  # noqa: ANN001 - a bare ASGI app
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None,
                                          log_level="info", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "uvicorn to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), 5) as client:
        client.sendall(b"GET /probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        client.recv(1024)
    wait_until(lambda: any("/probe" in line["event"] for line in json_lines()), 10,
               "uvicorn's access line")
    server.should_exit = True
    thread.join(10)

    lines = json_lines()
    assert {"uvicorn.error", "uvicorn.access"} <= {line["logger"] for line in lines}
    assert any(line["event"].startswith("Uvicorn running on") for line in lines)
