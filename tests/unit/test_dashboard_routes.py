"""The dashboard's routes on fakeredis: the page served without a token, its data behind
one; a room's floor share, usage and failures after it ran; the rooms overview."""

from __future__ import annotations

import fakeredis

from parley.api import dashboard
from parley.shared.keys import Keys
from tests.support.api import AUTH, PREFIX, run_room, spec_json
from tests.support.rooms import rotating_scripts


def test_the_page_is_served_without_a_token_and_its_data_needs_one(secured) -> None:
    page = secured.get("/")
    assert page.status_code == 200 and 'src="/static/app.js"' in page.text
    assert secured.get("/static/app.js").status_code == 200
    refused = secured.get("/dashboard/rooms")
    assert refused.status_code == 401 and "error" in refused.json()
    assert secured.get("/dashboard/rooms", headers=AUTH).json() ["rooms"] == []


def test_a_room_that_ran_has_its_floor_share_usage_and_failures(server, secured,
                                                                monkeypatch) -> None:
    scripts = rotating_scripts(2, 3)
    scripts["agent1"][1] = {"error": "provider down"}
    spec = spec_json()
    for agent in spec["agents"]:
        agent["script"] = scripts[agent["name"]]
    room = secured.post("/rooms", json=spec, headers=AUTH).json()["room"]
    secured.post(f"/rooms/{room}/messages", json={"sender": "Ann", "content": "go"},
                 headers=AUTH)
    run_room(server, room)

    stats = secured.get(f"/dashboard/rooms/{room}/stats", headers=AUTH).json()
    floor = stats["floor"]
    assert floor["total"] == sum(row["messages"] for row in floor["agents"]) >= 2
    assert [row["agent"] for row in floor["agents"]] == ["agent0", "agent1"]
    assert 0 <= floor["gini"] <= 0.5
    assert stats["policy"]["kind"] == "bid" and stats["policy"]["threshold"] == 0.5
    turns = secured.get(f"/rooms/{room}/turns", headers=AUTH).json()["turns"]
    assert [point["turn"] for point in stats["usage"]["points"]] == [t["turn"] for t in turns]
    assert [(f["agent"], f["status"], f["error_kind"]) for f in stats["failures"]] == [
        ("agent1", "error", "scripted")]
    assert stats["policy_state"] is None
    monkeypatch.setattr(dashboard, "FLOOR_WINDOW", 2)  # only the newest messages count
    newest = secured.get(f"/dashboard/rooms/{room}/stats", headers=AUTH).json()["floor"]
    assert newest["total"] == 2

    [row] = secured.get("/dashboard/rooms", headers=AUTH).json()["rooms"]
    assert (row["room"], row["policy"], row["status"]) == (room, "bid", "idle")
    assert row["prompt_tokens"] == row["completion_tokens"] == 0  # scripted agents are free
    assert row["lease_age_s"] is None and row["lease_ttl_left_s"] is None  # let go once idle
    fakeredis.FakeRedis(server=server).set(Keys(PREFIX).lease(room), "c9:3", px=4000)
    [row] = secured.get("/dashboard/rooms", headers=AUTH).json()["rooms"]
    assert row["holder"] == "c9" and 1.0 <= row["lease_age_s"] < 2.0  # a 5 s ttl, 4 s left


def test_the_stats_of_a_room_that_is_not_there_is_a_json_404(secured) -> None:
    answer = secured.get("/dashboard/rooms/nope/stats", headers=AUTH)
    assert answer.status_code == 404
    assert "nope" in answer.json()["error"]


def test_a_rooms_turns_mark_each_silent_answer_and_its_stats_list_the_agents(server, secured
                                                                           ) -> None:
    spec = spec_json()
    spec["agents"][0].update(role="Planner", description="Proposes the plan")
    spec["agents"][1]["script"] = [{"score": 0.9, "message": ""}] * 3  # never says anything
    room = secured.post("/rooms", json=spec, headers=AUTH).json()["room"]
    secured.post(f"/rooms/{room}/messages", json={"sender": "Ann", "content": "go"}, headers=AUTH)
    run_room(server, room)

    turns = secured.get(f"/dashboard/rooms/{room}/turns", headers=AUTH).json()
    plain = secured.get(f"/rooms/{room}/turns", headers=AUTH).json()
    assert [[{k: v for k, v in a.items() if k != "silent"} for a in t["answers"]]
            for t in turns["turns"]] == [t["answers"] for t in plain["turns"]]
    assert {(a["agent"], a["silent"]) for t in turns["turns"] for a in t["answers"]} == {
        ("agent0", False), ("agent1", True)}
    stats = secured.get(f"/dashboard/rooms/{room}/stats", headers=AUTH).json()
    assert stats["agents"] == [
        {"name": "agent0", "role": "Planner", "description": "Proposes the plan", "model": "scripted",
         "running": []},
        {"name": "agent1", "role": "", "description": "", "model": "scripted", "running": []}]
