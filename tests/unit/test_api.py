"""The HTTP API on fakeredis: the CLI's answers as JSON, every refusal a JSON error naming
the field or the reason, tokens, the body limit, paging, and the event streams."""

from __future__ import annotations

import asyncio
import json
import logging

import fakeredis
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from parley import cli
from parley.api import fanout
from parley.api.app import make_app
from parley.api.server import RedactTokens, check_bind, is_loopback
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.api import AUTH, BASE_URL, PREFIX, TOKEN, app_client, run_room, spec_json


def ran_room(api: TestClient, server, turns: int = 2) -> str:
    """A room created and posted into over HTTP, whose run has ended."""
    room = api.post("/rooms", json=spec_json(turns), params={"room": "r1"}).json()["room"]
    assert api.post(f"/rooms/{room}/messages", json={"sender": "Ann", "content": "go"}
                    ).status_code == 202
    run_room(server, room)
    return room


def test_creating_a_room_answers_201_with_its_id_as_rooms_create_json(api):
    reply = api.post("/rooms", json=spec_json(), params={"room": "r1"})
    assert reply.status_code == 201
    assert reply.json() == {"room": "r1", "name": "test-room", "policy": "bid",
                            "agents": ["agent0", "agent1"], "organization": "default"}
    assert [room["room"] for room in api.get("/rooms").json()["rooms"]] == ["r1"]
    assert api.get("/rooms/r1").json()["agents"] == ["agent0", "agent1"]
    assert api.get("/rooms/r1/spec").json()["policy"]["kind"] == "bid"


def test_a_spec_with_a_bad_field_is_422_naming_the_field(api):
    spec = spec_json()
    spec["policy"]["threshold"] = 7
    reply = api.post("/rooms", json=spec)
    assert reply.status_code == 422
    assert reply.json()["error"].startswith("invalid room spec: policy.threshold:")


def test_a_spec_with_more_agents_than_a_room_may_have_is_422_naming_the_bound(api):
    spec = spec_json()
    spec["agents"] = [{**spec["agents"][0], "name": f"agent{i}"} for i in range(257)]
    reply = api.post("/rooms", json=spec)
    assert reply.status_code == 422
    assert reply.json()["error"] == ("invalid room spec: agents: a room may have at most 256 "
                                     "agents (PARLEY_MAX_AGENTS), this spec has 257")


def test_a_spec_with_an_unknown_field_is_422_naming_the_nearest_field(api):
    spec = {**spec_json(), "limits": {"max_tokens": 100}}
    reply = api.post("/rooms", json=spec)
    assert (reply.status_code, reply.json()["error"]) == (
        422, "invalid room spec: limits.max_tokens: Extra inputs are not permitted: did you "
             "mean max_tokens_per_run or max_tokens_per_room?")


@pytest.mark.parametrize(("body", "status", "says"), [
    (b"{not json", 400, "the body is not valid JSON"),
    (b"[" * 100_000, 413, "nested too deeply"),
    (json.dumps({"name": "x"}).encode(), 422, "agents: Field required"),
])
def test_a_body_that_is_no_spec_is_refused_saying_why(api, body, status, says):
    reply = api.post("/rooms", content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == status
    assert says in reply.json()["error"]


def test_a_taken_or_invalid_room_id_is_refused(api):
    assert api.post("/rooms", json=spec_json(), params={"room": "r1"}).status_code == 201
    taken = api.post("/rooms", json=spec_json(), params={"room": "r1"})
    assert (taken.status_code, taken.json()) == (409, {"error": "room 'r1' already exists"})
    bad = api.post("/rooms", json=spec_json(), params={"room": "no/slash"})
    assert bad.status_code == 400 and "invalid room id" in bad.json()["error"]


def test_an_unknown_room_is_404_json_on_every_route(api):
    for method, path in [("GET", "/rooms/nope"), ("GET", "/rooms/nope/messages"),
                         ("GET", "/rooms/nope/turns"), ("GET", "/rooms/nope/queue"),
                         ("GET", "/rooms/nope/events"), ("POST", "/rooms/nope/pause"),
                         ("POST", "/rooms/nope/cancel"), ("DELETE", "/rooms/nope"),
                         ("POST", "/rooms/nope/archive")]:
        reply = api.request(method, path)
        assert (reply.status_code, reply.json()) == (404, {"error": "no room 'nope'"}), path
    assert api.post("/rooms/nope/messages", json={"content": "hi"}).status_code == 404


def test_a_post_is_202_with_its_inbox_id_and_bad_posts_name_the_problem(api):
    api.post("/rooms", json=spec_json(), params={"room": "r1"})
    posted = api.post("/rooms/r1/messages", json={"sender": "Ann", "content": "hello"})
    assert posted.status_code == 202
    assert posted.json()["room"] == "r1" and "-" in posted.json()["inbox_id"]
    missing = api.post("/rooms/r1/messages", json={"sender": "Ann"})
    assert (missing.status_code, missing.json()) == (422, {"error": "content: Field required"})
    as_agent = api.post("/rooms/r1/messages", json={"sender": "agent0", "content": "hi"})
    assert as_agent.status_code == 400 and "is an agent in room r1" in as_agent.json()["error"]


def test_messages_are_paged_by_after_seq(api, server):
    room = ran_room(api, server, turns=3)
    whole = api.get(f"/rooms/{room}/messages").json()
    assert [m["seq"] for m in whole["messages"]] == [1, 2, 3, 4]
    assert whole["more"] is False and whole["next_after_seq"] == 4
    page = api.get(f"/rooms/{room}/messages", params={"after_seq": 1, "limit": 2}).json()
    assert [m["seq"] for m in page["messages"]] == [2, 3]
    assert page["more"] is True and page["next_after_seq"] == 3
    assert page["messages"][0] == whole["messages"][1]
    bad = api.get(f"/rooms/{room}/messages", params={"after_seq": -1})
    assert bad.status_code == 422 and bad.json()["error"].startswith("query.after_seq:")


def test_turns_are_parley_turns_json(api, server):
    room = ran_room(api, server)
    turns = api.get(f"/rooms/{room}/turns").json()
    assert turns["room"] == room and turns["open_turn"] is None
    assert [turn["winner"] for turn in turns["turns"]][:2] == ["agent1", "agent0"]


def test_the_queue_of_a_room_without_one_is_409(api):
    api.post("/rooms", json=spec_json(), params={"room": "r1"})
    reply = api.get("/rooms/r1/queue")
    assert reply.status_code == 409 and "need a mention room" in reply.json()["error"]


def test_pause_resume_cancel_and_delete_answer_as_the_cli_json(api, server):
    room = ran_room(api, server)
    assert api.post(f"/rooms/{room}/pause").json() == {"room": room, "paused": True,
                                                       "changed": True}
    assert api.post(f"/rooms/{room}/pause").json()["changed"] is False
    assert api.post(f"/rooms/{room}/resume").json() == {"room": room, "resumed": True,
                                                        "changed": True}
    assert api.post(f"/rooms/{room}/cancel").json() == {
        "room": room, "cancelled": False, "run": 1, "posts_waiting": 0}
    deleted = api.delete(f"/rooms/{room}").json()
    assert deleted["deleted"] is True and deleted["keys"] > 0
    assert api.get(f"/rooms/{room}").status_code == 404


def test_deleting_a_held_room_is_409_unless_forced(api, server):
    api.post("/rooms", json=spec_json(), params={"room": "r1"})
    assert api.get("/rooms/r1").json()["lease_ttl_left_s"] is None
    fakeredis.FakeRedis(server=server).set(Keys(PREFIX).lease("r1"), "c9:1")
    fakeredis.FakeRedis(server=server).pexpire(Keys(PREFIX).lease("r1"), 4000)
    listed = api.get("/rooms").json()
    assert 3 < listed["rooms"][0]["lease_ttl_left_s"] <= 4 and listed["lease_ttl_s"] == 5.0
    assert listed["rooms"][0]["holder"] == "c9"
    held = api.delete("/rooms/r1")
    assert held.status_code == 409 and "held by coordinator c9" in held.json()["error"]
    assert api.delete("/rooms/r1", params={"force": "true"}).status_code == 200


def test_archive_gives_the_rooms_archive_and_removes_it_only_when_asked(api, server):
    room = ran_room(api, server)
    kept = api.post(f"/rooms/{room}/archive")
    lines = [json.loads(line) for line in kept.text.splitlines()]
    assert lines[0]["kind"] == "room" and lines[-1] == {
        "kind": "end", "counts": {"log": 3, "turn": 2, "inbox": 0, "dead": 0}}
    assert kept.headers["x-parley-removed"] == "false"
    assert api.get(f"/rooms/{room}").status_code == 200
    removed = api.post(f"/rooms/{room}/archive", params={"remove": "true"})
    assert removed.headers["x-parley-removed"] == "true" and removed.text == kept.text.replace(
        str(lines[0]["archived_at"]), str(json.loads(removed.text.splitlines()[0])["archived_at"]))
    assert api.get(f"/rooms/{room}").status_code == 404


def test_a_request_without_a_good_token_is_401_json(secured):
    missing = secured.get("/rooms")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "missing bearer token" in missing.json()["error"]
    wrong = secured.get("/rooms", headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.json()) == (401, {"error": "invalid bearer token"})
    assert secured.get("/rooms", headers=AUTH).status_code == 200
    assert secured.get("/rooms", headers={"Authorization": "Bearer another"}).status_code == 200


def test_only_the_health_check_dashboard_and_event_streams_take_no_header(secured):
    assert secured.get("/healthz").json() == {"status": "ok"}
    assert "dashboard" in secured.get("/").text
    assert secured.get("/openapi.json").status_code == 401
    assert secured.get("/openapi.json", headers=AUTH).json()["info"]["title"] == "parley"
    # The browsable docs load their scripts from a CDN: not served.
    assert secured.get("/docs", headers=AUTH).status_code == 404
    assert secured.get("/rooms", params={"access_token": TOKEN}).status_code == 401
    # An event stream takes the token in the query: past auth, this one is a 404.
    stream = secured.get("/rooms/nope/events", params={"access_token": TOKEN})
    assert stream.status_code == 404
    assert secured.get("/rooms/nope/events", params={"access_token": "x"}).status_code == 401


def test_an_unauthenticated_body_is_refused_before_it_is_read(secured):
    reply = secured.post("/rooms", content=b"x" * (3 << 20))
    assert reply.status_code == 401


def test_a_body_over_the_limit_is_413_json_declared_or_chunked(server):
    with app_client(server, api_max_body_bytes=4096) as api:
        api.headers["Content-Type"] = "application/json"
        declared = api.post("/rooms", content=b"{" + b" " * 5000 + b"}")
        assert declared.status_code == 413
        assert declared.json() == {"error": "request body too large: the limit is 4,096 bytes "
                                   "(PARLEY_API_MAX_BODY_BYTES)"}
        chunked = api.post("/rooms", content=iter([b"{", b" " * 3000, b" " * 3000, b"}"]))
        assert chunked.status_code == 413
        within = api.post("/rooms", content=iter([b"{", b" " * 1000, b"}"]))
        assert within.status_code == 422  # read whole, then refused as a spec


def test_a_bad_last_event_id_is_400(api):
    api.post("/rooms", json=spec_json(), params={"room": "r1"})
    reply = api.get("/rooms/r1/events", headers={"Last-Event-ID": "yesterday"})
    assert reply.status_code == 400 and "Last-Event-ID 'yesterday'" in reply.json()["error"]


def test_metrics_count_requests_by_route_template_and_status(api):
    api.get("/rooms/a")
    api.get("/rooms/b")
    text = api.get("/metrics").text
    assert 'parley_api_requests_total{method="GET",route="/rooms/{room}",status="404"}' in text
    assert "parley_api_request_seconds_bucket" in text
    assert "parley_api_sse_streams" in text
    assert "process_cpu_seconds_total" in text
    # The coordinators' and workers' metrics are theirs to serve, not the API's.
    assert "parley_turns_total" not in text and "parley_answers_total" not in text


def test_unknown_routes_and_methods_are_json(api):
    assert api.get("/nowhere").json() == {"error": "no route GET /nowhere"}
    reply = api.put("/rooms")
    assert reply.status_code == 405 and reply.json()["error"] == "PUT is not allowed on /rooms"


def read_frames(server, stream_of, until: str, most: int = 100) -> list[dict]:
    """SSE messages of the stream ``stream_of(redis)`` builds, parsed, up to and including
    the first of type ``until``."""

    async def collect() -> list[dict]:
        frames = []
        stream = stream_of(fakeredis.FakeAsyncRedis(server=server))
        async for chunk in stream:
            if chunk.startswith(b":"):
                continue
            fields = dict(line.split(": ", 1) for line in chunk.decode().strip().split("\n"))
            frames.append({**fields, "data": json.loads(fields["data"])})
            if fields["event"] == until or len(frames) >= most:
                await stream.aclose()
                return frames
        return frames

    return asyncio.run(asyncio.wait_for(collect(), 10))


def test_a_room_stream_resumes_after_an_id_without_repeating_and_ends_when_the_room_goes(
        api, server, monkeypatch):
    monkeypatch.setattr(fanout, "BLOCK_MS", 50)
    room = ran_room(api, server)
    keys = Keys(PREFIX)

    def follow(after: str, until: str) -> list[dict]:
        return read_frames(server, lambda r: fanout.follow_room(fanout.Hub(r, keys), r, room,
                                                                after), until)

    whole = follow("0-0", "run_ended")
    assert [frame["event"] for frame in whole[:2]] == ["lease_taken", "run_started"]
    assert whole[-1]["data"]["stop_reason"] == "max_messages"
    assert all(frame["id"] == frame["data"]["id"] for frame in whole)
    middle = whole[3]["id"]
    rest = follow(middle, "run_ended")
    assert [frame["id"] for frame in rest] == [frame["id"] for frame in whole[4:]]
    api.delete(f"/rooms/{room}")
    gone = follow(whole[-1]["id"], "room_deleted")
    assert [frame["event"] for frame in gone] == ["room_deleted"]


def test_a_room_stream_until_a_type_closes_after_the_first_event_of_it(api, server):
    room = ran_room(api, server)
    api.post(f"/rooms/{room}/messages", json={"sender": "Ann", "content": "more"})
    run_room(server, room)  # a second run: the stream closes at the first one's end
    store = RoomStore(fakeredis.FakeRedis(server=server), Keys(PREFIX))
    types = [event.type for event in store.read_events(room)]
    assert types.count("run_ended") == 2

    reply = api.get(f"/rooms/{room}/events", params={"until": "run_ended"})

    assert reply.status_code == 200
    sent = [line.removeprefix("event: ") for line in reply.text.splitlines()
            if line.startswith("event: ")]
    assert sent == types[:types.index("run_ended") + 1]


def test_a_room_stream_until_something_that_is_not_an_event_type_is_400(api):
    reply = api.get("/rooms/r1/events", params={"until": "end"})
    assert reply.status_code == 400
    assert reply.json()["error"].startswith("until 'end' is not an event type (one of: ")


def test_the_runs_stream_tells_each_rooms_run_start_and_end(api, server, monkeypatch):
    monkeypatch.setattr(fanout, "RUNS_BLOCK_MS", 50)
    room = ran_room(api, server)
    keys = Keys(PREFIX)
    frames = read_frames(server, lambda r: fanout.follow_runs(fanout.Hub(r, keys), r, "0-0"),
                         "run_ended")
    assert [(f["event"], f["data"]["room"], f["data"]["run"]) for f in frames] == [
        ("run_started", room, 1), ("run_ended", room, 1)]


def test_without_tokens_only_loopback_may_be_bound():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    with pytest.raises(ValueError, match="refusing to serve the API on 0.0.0.0"):
        check_bind(Settings(), "0.0.0.0")
    check_bind(Settings(api_tokens=("t",)), "0.0.0.0")


def test_parley_api_refuses_a_public_host_without_tokens_in_one_line(worker_env):
    worker_env(PARLEY_API_TOKENS=None)
    result = CliRunner().invoke(cli.app, ["api", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "parley: refusing to serve the API on 0.0.0.0: neither PARLEY_API_TOKENS nor "
        "PARLEY_API_TOKENS_FILE is set, and "
        "without tokens the API listens on loopback only (set tokens, or use --host 127.0.0.1)"]


def test_a_token_in_a_query_is_masked_in_the_access_log():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "GET",
                               f"/events?after=1-0&access_token={TOKEN}", "1.1", 200), None)
    assert RedactTokens().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /events?after=1-0&access_token=*** HTTP/1.1" 200'


def test_a_mention_rooms_queue_is_parley_queue_json(api, server):
    spec = {"name": "incident",
            "policy": {"kind": "mention", "everyone": ["dev", "sre"], "people": ["oncall"]},
            "agents": [{"name": "dev", "model": "scripted",
                        "script": [{"content": "@oncall roll back?"}]},
                       {"name": "sre", "model": "scripted", "script": [{"content": "ok"}]}]}
    assert api.post("/rooms", json=spec, params={"room": "m1"}).status_code == 201
    api.post("/rooms/m1/messages", json={"sender": "oncall", "content": "@dev status?"})
    run_room(server, "m1")
    assert api.get("/rooms/m1/queue").json() == {
        "speaking": None, "queue": [], "listening": [], "asked": [["dev", "oncall"]],
        "waiting": True, "over": False}


def test_redis_or_the_broker_down_is_503_json_without_the_password():
    settings = Settings(key_prefix=PREFIX, redis_url="redis://:hunter2@127.0.0.1:1/0")
    with TestClient(make_app(settings), base_url=BASE_URL) as api:
        health = api.get("/healthz")
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
        assert "redis://:***@127.0.0.1:1/0 does not answer" in health.json()["error"]
        rooms = api.get("/rooms")
        assert (rooms.status_code, rooms.json()) == (
            503, {"error": "Redis is unavailable: try again shortly"})
        workers = api.get("/workers")
        assert workers.status_code == 503 and "the broker at" in workers.json()["error"]
        assert all("hunter2" not in reply.text for reply in (health, rooms, workers))
