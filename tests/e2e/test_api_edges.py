"""`parley api` as its own process at its edges, over raw sockets: idle connections, heads
and bodies sent slowly, a request framed two ways, the connection cap and the open-file
limit; three hundred followers of one room on one Redis reader; and `/workers` right
after the broker restarted."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from parley import processes as procs
from parley.client import Client
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]
# The limits of most tests here: short, so that each is passed within a couple of seconds.
QUICK = {"PARLEY_API_KEEP_ALIVE_S": "1", "PARLEY_API_HEADER_TIMEOUT_S": "2",
         "PARLEY_API_BODY_TIMEOUT_S": "2"}
# Long enough that no deadline closes what a test holds open on purpose.
PATIENT = {"PARLEY_API_KEEP_ALIVE_S": "60", "PARLEY_API_HEADER_TIMEOUT_S": "60"}


class Api:
    """A `parley api` process on a free port of 127.0.0.1 (no tokens: loopback only)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    def connect(self, timeout_s: float = 10.0) -> socket.socket:
        """A new connection to it."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s)

    def healthy(self) -> bool:
        """True once /healthz answers 200."""
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False


@pytest.fixture
def start_api(processes: procs.ProcessGroup) -> Iterator[Callable[..., Api]]:
    """Start `parley api` with extra settings (and a command to run it under), tracked by
    the test's process group so it is stopped by its PID."""

    def start(env: dict[str, str], prefix: tuple[str, ...] = ()) -> Api:
        port = procs.free_port()
        log = processes.directory / f"api-{port}.log"
        command = [*prefix, *procs.parley_command("api", "--port", str(port))]
        process = procs.start(command, log, {**processes.env, **env})
        processes.processes.append(process)
        processes.logs[process.pid] = log
        api = Api(process, port, log)
        wait_until(api.healthy, 30, "the API to answer")
        return api

    yield start


def read_until_closed(sock: socket.socket, most_s: float,
                      send_every: tuple[float, bytes] | None = None) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took;
    ``send_every`` (seconds, bytes) keeps sending meanwhile, as a slow client does."""
    started = time.monotonic()
    sock.settimeout(send_every[0] if send_every else most_s)
    received = b""
    while time.monotonic() - started < most_s:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if send_every:
                try:
                    sock.sendall(send_every[1])
                except OSError:
                    break
            continue
        except ConnectionResetError:  # closed with the client's bytes unread: closed all the same
            chunk = b""
        if not chunk:
            return received, time.monotonic() - started
        received += chunk
    raise AssertionError(f"still open after {most_s}s; received {received[:300]!r}")


def status_and_json(answer: bytes) -> tuple[int, dict]:
    """The status and JSON body of one HTTP answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(start_api):
    api = start_api(QUICK)
    with api.connect() as sock:
        received, took = read_until_closed(sock, 10)
    assert received == b"" and 0.8 < took < 3


def test_a_head_sent_slowly_is_408_and_closed_while_a_stream_stays_open(start_api, settings):
    api = start_api(QUICK)
    client = Client(settings)
    room = client.create_room(scripted_spec(rotating_scripts(2, 1)))
    with httpx.stream("GET", f"http://127.0.0.1:{api.port}/rooms/{room}/events",
                      params={"after": "$"}, timeout=30) as stream:
        assert stream.status_code == 200
        with api.connect() as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            received, took = read_until_closed(sock, 10, send_every=(0.2, b"X-Pad: 1\r\n"))
        assert status_and_json(received) == (408, {
            "error": "the request's head did not arrive within 2s (PARLEY_API_HEADER_TIMEOUT_S)"})
        assert 1.5 < took < 4
        # The stream outlived every deadline: an event written now still reaches it.
        client.redis.xadd(client.store.keys.events(room), {"type": "probe", "ts": "1"})
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("event:")) == "event: probe"


def test_a_body_sent_slowly_is_408_and_closed(start_api):
    api = start_api(QUICK)
    with api.connect() as sock:
        sock.sendall(b"POST /rooms HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 1000\r\n\r\n{")
        received, took = read_until_closed(sock, 10, send_every=(0.2, b" "))
    assert status_and_json(received) == (408, {
        "error": "the request's body did not arrive within 2s of its head "
                 "(PARLEY_API_BODY_TIMEOUT_S)"})
    assert 1.5 < took < 4


def test_a_request_framed_two_ways_is_400_and_its_connection_closed(start_api):
    api = start_api(PATIENT)
    with api.connect() as sock:
        sock.sendall(b"POST /rooms HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        received, took = read_until_closed(sock, 10)
    status, body = status_and_json(received)
    assert status == 400 and "both Content-Length and Transfer-Encoding" in body["error"]
    assert b"connection: close" in received.lower() and took < 2


def get_healthz(sock: socket.socket) -> bytes:
    """One keep-alive GET /healthz on ``sock``: its answer's head."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b'"status":"ok"}' not in answer:
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    return answer


def test_past_the_connection_cap_a_new_connection_is_503_and_closed(start_api):
    api = start_api({**PATIENT, "PARLEY_API_MAX_CONNECTIONS": "5"})
    held = [api.connect() for _ in range(5)]
    try:
        for sock in held:
            assert get_healthz(sock).startswith(b"HTTP/1.1 200")
        with api.connect() as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            received, took = read_until_closed(sock, 10)
        assert status_and_json(received) == (503, {
            "error": "too many connections: this API serves 5 at once "
                     "(PARLEY_API_MAX_CONNECTIONS); try again shortly"})
        assert took < 3
        held.pop().close()
        wait_until(api.healthy, 10, "a connection to be served again once one closed")
    finally:
        for sock in held:
            sock.close()


def test_at_the_open_file_limit_it_caps_connections_keeps_serving_and_logs_little(start_api):
    api = start_api(PATIENT, prefix=("prlimit", "--nofile=2048:2048", "--"))
    flood = []
    try:
        started = time.monotonic()
        for _ in range(2500):  # more than the API has files for
            flood.append(api.connect())
        with api.connect() as sock:  # answered at once, not left hanging
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            received, _took = read_until_closed(sock, 5)
        assert status_and_json(received)[0] == 503
        flooded_s = time.monotonic() - started
    finally:
        for sock in flood:
            sock.close()
    wait_until(api.healthy, 10, "the API to serve again")
    log = api.log.read_text()
    assert '"serving": 672' in log  # (2048 files - 704 kept) / 2 files each
    assert "socket.accept() out of system resource" not in log
    refusals = [line for line in log.splitlines() if "refusing connections" in line]
    assert 1 <= len(refusals) <= flooded_s + 2
    assert len(log) < 50_000


def followers_first_events(port: int, room: str, count: int, once_all_follow: Callable[[], None]
                           ) -> list[str]:
    """``count`` followers of the room's new events: once all of them follow,
    ``once_all_follow`` runs (in a thread); then the first event line each received (or the
    status line that refused it)."""

    async def follow(following: asyncio.Queue[None]) -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /rooms/{room}/events?after=$ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     .encode())
        status = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0].decode()
        await following.put(None)
        line = b""
        while " 200 " in status and not line.startswith(b"event:"):
            line = await reader.readline()
        writer.close()
        return line.decode().strip() if " 200 " in status else status

    async def run() -> list[str]:
        following: asyncio.Queue[None] = asyncio.Queue()
        followers = [asyncio.create_task(follow(following)) for _ in range(count)]
        for _ in range(count):
            await asyncio.wait_for(following.get(), 30)
        await asyncio.get_running_loop().run_in_executor(None, once_all_follow)
        return await asyncio.wait_for(asyncio.gather(*followers), 30)

    return asyncio.run(run())


def test_three_hundred_followers_of_one_room_share_one_redis_reader(start_api, settings):
    api = start_api({})
    client = Client(settings)
    room = client.create_room(scripted_spec(rotating_scripts(2, 1)))
    name = f"parley-api-reader-{api.process.pid}"
    readers: list[dict] = []

    def count_readers_and_write() -> None:
        readers.extend(entry for entry in client.redis.client_list() if entry["name"] == name)
        client.redis.xadd(client.store.keys.events(room), {"type": "probe", "ts": "1"})

    got = followers_first_events(api.port, room, 320, count_readers_and_write)
    assert got == ["event: probe"] * 320
    [reader] = readers
    assert reader["cmd"] == "xread"


def test_the_first_workers_after_the_broker_restarts_answers(start_api, tmp_path):
    port = procs.free_port()
    broker = procs.start_redis(port, tmp_path)
    try:
        api = start_api({"PARLEY_BROKER_URL": f"redis://127.0.0.1:{port}/0"})
        url = f"http://127.0.0.1:{api.port}/workers"
        assert httpx.get(url, timeout=10).status_code == 200
        procs.stop(broker)
        broker = procs.start_redis(port, tmp_path)
        # One task waiting tells a fresh answer from the one cached before the restart.
        redis.Redis(port=port).lpush("parley.agents", "{}")

        def fresh() -> bool:
            reply = httpx.get(url, timeout=10)
            assert reply.status_code == 200, reply.text
            return {"name": "parley.agents", "depth": 1} in reply.json()["queues"]

        wait_until(fresh, 20, "an answer from the restarted broker")
    finally:
        procs.stop(broker)
