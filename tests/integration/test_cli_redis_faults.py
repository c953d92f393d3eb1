"""The CLI against a Redis it cannot use: a hung server, TLS asked of a plain one, a TLS
handshake that fails, a closed port. Each is one line on stderr and exit code 2, in
bounded time, without the password; and following an idle room is not a timeout."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.client.client import FOLLOW_BLOCK_MS, REDIS_CONNECT_TIMEOUT_S, REDIS_READ_TIMEOUT_S, Client
from parley.processes import free_port, parley_command, start_redis, stop
from parley.shared.models import Message
from tests.support.reads import BlockingReads
from tests.support.rooms import scripted_spec

# The CLI's own timeout plus the interpreter's start-up, with room for a loaded machine.
BOUND_S = max(REDIS_CONNECT_TIMEOUT_S, REDIS_READ_TIMEOUT_S) + 25
PASSWORD = "s3cret-pw"

needs_redis_server = pytest.mark.skipif(shutil.which("redis-server") is None,
                                        reason="redis-server is not installed")


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A redis-server of this test's own, stopped by its PID (continued first, in case
    the test stopped it)."""
    port = free_port()
    server = start_redis(port, tmp_path)
    try:
        yield server, port
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGCONT)
        stop(server)


def parley_status(redis_url: str) -> tuple[int, str, float]:
    """``parley status`` as its own process: exit code, stderr, seconds taken."""
    started = time.monotonic()
    done = subprocess.run(parley_command("status"), capture_output=True, text=True,
                          timeout=BOUND_S, env={**os.environ, "PARLEY_REDIS_URL": redis_url})
    return done.returncode, done.stderr, time.monotonic() - started


def assert_one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert PASSWORD not in stderr
    return lines[0]


@needs_redis_server
def test_a_hung_redis_is_one_line_and_exit_2_not_a_hang(private_redis):
    server, port = private_redis
    os.kill(server.pid, signal.SIGSTOP)
    code, stderr, took = parley_status(f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    line = assert_one_line(stderr)
    assert code == 2 and took < BOUND_S
    assert line.startswith(f"parley: cannot reach Redis at redis://:***@127.0.0.1:{port}/0 (")
    assert "did not answer in time" in line


@needs_redis_server
def test_tls_asked_of_a_plain_redis_is_one_line_naming_tls(private_redis):
    _, port = private_redis
    code, stderr, took = parley_status(f"rediss://:{PASSWORD}@127.0.0.1:{port}/0")
    line = assert_one_line(stderr)
    assert code == 2 and took < BOUND_S
    assert line.startswith(f"parley: cannot reach Redis at rediss://:***@127.0.0.1:{port}/0 (")
    assert "the URL asks for TLS (rediss://): is the server speaking TLS" in line


def test_a_failed_tls_handshake_is_one_line_naming_tls():
    """A server that answers a TLS hello in plain text: the handshake fails at once."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def answer_in_plain_text() -> None:
            with listener.accept()[0] as connection:
                connection.recv(4096)
                connection.sendall(b"-ERR plain text here\r\n")

        threading.Thread(target=answer_in_plain_text, daemon=True).start()
        code, stderr, took = parley_status(f"rediss://:{PASSWORD}@127.0.0.1:{port}/0")
    line = assert_one_line(stderr)
    assert code == 2 and took < BOUND_S
    assert "the URL asks for TLS (rediss://): is the server speaking TLS" in line


def test_a_closed_port_is_one_line_without_the_password():
    port = free_port()
    code, stderr, _ = parley_status(f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    line = assert_one_line(stderr)
    assert code == 2
    assert line.startswith(f"parley: cannot reach Redis at redis://:***@127.0.0.1:{port}/0 (")
    assert line.endswith("start Redis or point PARLEY_REDIS_URL at one")


@pytest.mark.redis
def test_following_an_idle_room_blocks_past_one_wait_without_timing_out(settings, real_redis):
    client = Client(settings)
    room = client.create_room(scripted_spec({"A": [], "B": []}))
    reads = BlockingReads(client.store)
    followed = client.follow(room)
    wait_s = 1.5 * FOLLOW_BLOCK_MS / 1000
    got: list[Message] = []

    started = time.monotonic()
    follower = threading.Thread(target=lambda: got.append(next(followed)), daemon=True)
    follower.start()
    # Two whole waits come back empty, and the follower waits again.
    reads.wait_for(lambda: reads.started > 2, "the follower's third wait", timeout_s=4 * wait_s)
    client.redis.xadd(client.store.keys.log(room),
                      {"seq": 1, "sender": "User", "content": "late", "run": 1}, id="1-0")
    follower.join(10)

    (message,) = got
    assert (message.seq, message.content) == (1, "late")
    assert time.monotonic() - started >= wait_s * 0.9
