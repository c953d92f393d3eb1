"""The HTTP API as its own process, over real coordinator and worker processes: create a
scripted room, post, follow its events over SSE until the run ends, read the transcript
and turns, resume a stream without repeats, cancel a run, and refuse what must be
refused (no token, a body too large)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator

import httpx
import pytest

from parley.processes import free_port, stop
from tests.support.api import wait_for_api
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]
TOKEN = "e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def frames(response: httpx.Response) -> Iterator[dict]:
    """The server-sent events of a streaming response, each as {id, event, data}."""
    fields: dict = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            continue
        if not line:
            if fields:
                yield {**fields, "data": json.loads(fields["data"])}
            fields = {}
            continue
        name, _, value = line.partition(": ")
        fields[name] = value


def follow(http: httpx.Client, path: str, until: str, **options) -> list[dict]:
    """Frames of the stream at ``path`` up to and including the first ``until`` event."""
    seen = []
    with http.stream("GET", path, **options) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for frame in frames(response):
            seen.append(frame)
            if frame["event"] == until:
                return seen
    raise AssertionError(f"the stream ended before {until}: {seen}")


@pytest.fixture
def api(processes, queue) -> Iterator[httpx.Client]:
    """A worker, a coordinator and ``parley api`` with a token, and an HTTP client of it."""
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    port = free_port()
    server = processes.api("--port", str(port), env={"PARLEY_API_TOKENS": TOKEN})
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=30)

    wait_for_api(server, f"http://127.0.0.1:{port}", processes)
    yield http
    http.close()
    # uvicorn shuts down, then ends by the signal it was sent.
    assert stop(server) in (0, -signal.SIGTERM)
    log = processes.logs[server.pid].read_text()
    assert "Application shutdown complete" in log, log[-2000:]
    assert TOKEN not in log  # ?access_token= is masked in the access log


def test_a_room_runs_over_http_and_its_events_stream_until_the_run_ends(api, queue):
    spec = scripted_spec(rotating_scripts(2, 6, sleep=0.02), queue=queue, max_messages=4)
    created = api.post("/rooms", json=spec.model_dump(mode="json"))
    assert created.status_code == 201, created.text
    room = created.json()["room"]
    runs: list[dict] = []
    watcher = threading.Thread(target=lambda: runs.extend(follow(api, "/events", "run_ended")))
    watcher.start()
    wait_until(lambda: api.get("/metrics").text.count(
        'parley_api_sse_streams{route="/events"} 1.0'), 10, "the runs stream to open")

    with api.stream("GET", f"/rooms/{room}/events") as response:
        posted = api.post(f"/rooms/{room}/messages", json={"sender": "Ann", "content": "go"})
        assert posted.status_code == 202 and posted.json()["room"] == room
        events = []
        for frame in frames(response):
            events.append(frame)
            if frame["event"] == "run_ended":
                break
    watcher.join(30)

    assert events[-1]["data"]["stop_reason"] == "max_messages"
    committed = [e["data"]["seq"] for e in events if e["event"] == "message_committed"]
    assert committed == [1, 2, 3, 4]
    assert all(e["id"] == e["data"]["id"] for e in events)
    assert [(r["event"], r["data"]["room"]) for r in runs] == [("run_started", room),
                                                               ("run_ended", room)]
    messages = api.get(f"/rooms/{room}/messages").json()["messages"]
    assert [(m["seq"], m["sender"]) for m in messages] == [
        (1, "Ann"), (2, "agent1"), (3, "agent0"), (4, "agent1")]
    page = api.get(f"/rooms/{room}/messages", params={"after_seq": 2, "limit": 1}).json()
    assert [m["seq"] for m in page["messages"]] == [3] and page["more"] is True
    turns = api.get(f"/rooms/{room}/turns").json()
    assert [t["winner"] for t in turns["turns"]] == ["agent1", "agent0", "agent1"]
    assert api.get(f"/rooms/{room}").json()["status"] == "idle"

    resumed = follow(api, f"/rooms/{room}/events", "run_ended",
                     headers={**AUTH, "Last-Event-ID": events[2]["id"]})
    assert [e["id"] for e in resumed] == [e["id"] for e in events[3:]]
    by_query = follow(api, f"/rooms/{room}/events", "run_ended", headers={},
                      params={"access_token": TOKEN, "after": events[-2]["id"]})
    assert [e["id"] for e in by_query] == [events[-1]["id"]]

    # A room deleted while followed ends its stream, and every closed stream is let go.
    with api.stream("GET", f"/rooms/{room}/events", params={"after": "$"}) as response:
        assert api.delete(f"/rooms/{room}").json()["deleted"] is True
        ending = list(frames(response))
    assert [frame["event"] for frame in ending] == ["room_deleted"]
    wait_until(lambda: 'parley_api_sse_streams{route="/rooms/{room}/events"} 0.0'
               in api.get("/metrics").text, 10, "the closed streams to be let go")


def test_a_run_is_cancelled_over_http(api, queue):
    scripts = rotating_scripts(2, 3)
    for script in scripts.values():
        script[0]["sleep"] = 30  # the first turn's answers never come in time
    spec = scripted_spec(scripts, queue=queue, bid_timeout_s=60)
    room = api.post("/rooms", json=spec.model_dump(mode="json")).json()["room"]
    with api.stream("GET", f"/rooms/{room}/events") as response:
        api.post(f"/rooms/{room}/messages", json={"content": "go"})
        seen = []
        for frame in frames(response):
            seen.append(frame["event"])
            if frame["event"] == "turn_opened":
                cancelled = api.post(f"/rooms/{room}/cancel", params={"reason": "enough"})
                assert cancelled.json() == {"room": room, "cancelled": True, "run": 1,
                                            "posts_waiting": 0}
            if frame["event"] == "run_ended":
                assert frame["data"]["stop_reason"] == "cancelled"
                assert frame["data"]["stop_detail"] == "enough"
                break
    assert "turn_decided" not in seen
    coordinators = api.get("/coordinators").json()["coordinators"]
    assert any(c["live"] for c in coordinators)

    def listed() -> dict | None:  # the worker answers the broker once it is up
        workers = api.get("/workers").json()
        return workers if any(queue in w["queues"] for w in workers["workers"]) else None

    workers = wait_until(listed, 30, "the worker to be listed")
    assert {"name": queue, "depth": 0} in workers["queues"]


def test_requests_without_a_token_or_too_large_are_refused_as_json(api):
    refused = httpx.get(f"{api.base_url}/rooms")
    assert refused.status_code == 401
    assert refused.json() == {"error": "missing bearer token: send Authorization: Bearer "
                              "<token>"}
    wrong = httpx.get(f"{api.base_url}/rooms", headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.json()) == (401, {"error": "invalid bearer token"})
    assert httpx.get(f"{api.base_url}/healthz").json() == {"status": "ok"}

    too_large = api.post("/rooms", content=b"{" + b" " * (3 << 20) + b"}")
    assert too_large.status_code == 413
    assert "request body too large" in too_large.json()["error"]
    chunked = api.post("/rooms", content=iter([b"{", b" " * (2 << 20), b" " * (1 << 20), b"}"]))
    assert chunked.status_code == 413
    assert api.get("/rooms/nope/events").json() == {"error": "no room 'nope'"}
