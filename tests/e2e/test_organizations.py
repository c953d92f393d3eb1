"""Two organizations on one cluster, through the real API process over a real coordinator
and a worker calling the local OpenAI-compatible stub: each token sees its own
organization's rooms only (another's answer 404, and never reach its event streams), roles
are refused what they may not do, an organization's own provider key reaches the stub for
its rooms only, an organization's daily token limit stops its room with ``budget``, and
the tokens file is read again on SIGHUP."""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator

import httpx
import pytest

from parley.api.access import digest
from parley.processes import free_port
from parley.shared.organizations import key_variable
from tests.e2e.test_api import frames
from tests.support.api import wait_for_api
from tests.support.openai_stub import OpenAIStub, tool_call
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV = "PARLEY_E2E_ORG_KEY"
CLUSTER_KEY, ACME_KEY = "sk-cluster-key", "sk-acme-own-key"
TOKENS = {"acme-admin": ("acme", "admin"), "acme-viewer": ("acme", "viewer"),
          "beta-admin": ("beta", "admin")}
# Each call reports 100 prompt and 10 completion tokens: beta's first turn (two bids)
# passes its day's 200.
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
LIMITS = {"beta": {"max_tokens_per_day": 200}}


def write_tokens(path, tokens: dict[str, tuple[str, str]]) -> None:
    path.write_text(json.dumps({
        "tokens": [{"sha256": digest(token), "organization": org, "role": role, "name": token}
                   for token, (org, role) in tokens.items()],
        "organizations": LIMITS}))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def room_spec(stub: OpenAIStub, queue: str, names: tuple[str, ...]) -> dict:
    """A bid room of ``names`` on the stub, ending after one agent message."""
    return {"name": "org-room", "policy": {"kind": "bid", "max_messages": 2},
            "agents": [{"name": name, "model": f"openai/{name}", "api_base": stub.url,
                        "api_key_env": KEY_ENV, "queue": queue} for name in names]}


@pytest.fixture
def cluster(processes, queue, tmp_path) -> Iterator[tuple[httpx.Client, OpenAIStub, object]]:
    with OpenAIStub() as stub:
        processes.worker("-Q", queue, "-c", "4", env={
            KEY_ENV: CLUSTER_KEY, key_variable("acme", KEY_ENV): ACME_KEY,
            "PARLEY_WORKER_KEY_ENVS": KEY_ENV, "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
        processes.coordinator()
        tokens_file = tmp_path / "tokens.json"
        write_tokens(tokens_file, TOKENS)
        port = free_port()
        server = processes.api("--port", str(port),
                               env={"PARLEY_API_TOKENS_FILE": str(tokens_file)})
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

        wait_for_api(server, f"http://127.0.0.1:{port}", processes)
        yield http, stub, (server, tokens_file)
        http.close()


def run_ended(http: httpx.Client, token: str, room: str) -> dict:
    """The room once its run has ended, read with ``token``."""
    def ended() -> dict | None:
        shown = http.get(f"/rooms/{room}", headers=bearer(token)).json()
        return shown if shown["run"] >= 1 and shown["status"] != "running" else None

    return wait_until(ended, 60, f"room {room}'s run to end")


def test_two_organizations_share_one_cluster_and_see_nothing_of_each_other(cluster, queue):
    http, stub, (server, tokens_file) = cluster
    stub.script("a-agent", tool_call(0.9, "acme speaks", **USAGE))
    stub.script("a-other", tool_call(0.1, "", **USAGE))
    stub.script("b-one", *(tool_call(0.9, "beta speaks", **USAGE) for _ in range(3)))
    stub.script("b-two", *(tool_call(0.1, "", **USAGE) for _ in range(3)))
    created = http.post("/rooms", params={"room": "acme-room"}, headers=bearer("acme-admin"),
                        json=room_spec(stub, queue, ("a-agent", "a-other")))
    assert created.status_code == 201, created.text
    assert created.json()["organization"] == "acme"
    beta_spec = room_spec(stub, queue, ("b-one", "b-two"))
    beta_spec["policy"]["max_messages"] = 10
    assert http.post("/rooms", params={"room": "beta-room"}, headers=bearer("beta-admin"),
                     json=beta_spec).status_code == 201

    # Across the boundary: every route answers as for a missing room.
    for method, path, body in [("GET", "/rooms/beta-room", None),
                               ("GET", "/rooms/beta-room/messages", None),
                               ("GET", "/rooms/beta-room/events", None),
                               ("POST", "/rooms/beta-room/messages", {"content": "hi"}),
                               ("GET", "/rooms/beta-room/approvals", None),
                               ("POST", "/rooms/beta-room/approvals/x1", {"approve": True}),
                               ("DELETE", "/rooms/beta-room", None)]:
        reply = http.request(method, path, json=body, headers=bearer("acme-admin"))
        assert (reply.status_code, reply.json()) == (404, {"error": "no room 'beta-room'"})
    assert [r["room"] for r in http.get("/rooms", headers=bearer("acme-viewer")).json()["rooms"]
            ] == ["acme-room"]
    # Roles: a viewer may read but not post; an admin of an organization sees no cluster.
    refused = http.post("/rooms/acme-room/messages", json={"content": "hi"},
                        headers=bearer("acme-viewer"))
    assert refused.status_code == 403
    assert http.get("/coordinators", headers=bearer("acme-admin")).status_code == 403
    assert http.get("/metrics", headers=bearer("acme-admin")).status_code == 403

    # acme follows /events while beta's room runs to its budget stop, then its own runs.
    seen: list[dict] = []
    following = threading.Event()

    def follow_runs() -> None:
        with http.stream("GET", "/events", headers=bearer("acme-viewer"),
                         timeout=60) as response:
            following.set()
            for frame in frames(response):
                seen.append(frame)
                if frame["event"] == "run_ended":
                    return

    follower = threading.Thread(target=follow_runs, daemon=True)
    follower.start()
    assert following.wait(30)
    assert http.post("/rooms/beta-room/messages", json={"content": "go"},
                     headers=bearer("beta-admin")).status_code == 202
    beta = run_ended(http, "beta-admin", "beta-room")
    assert beta["stop_reason"] == "budget"
    # Its first turn's two calls (110 tokens each) put beta over; a loaded machine may let
    # a second turn's go out before the worker counted the first's in the day's totals.
    detail = re.fullmatch(
        r"organization beta's max_tokens_per_day reached: organization beta's calls today "
        r"used (\d+) tokens \((\d+) prompt \+ (\d+) completion\), the limit is 200",
        beta["stop_detail"])
    assert detail, beta["stop_detail"]
    used, prompt, completion = map(int, detail.groups())
    calls = used // 110
    assert calls >= 2 and (used, prompt, completion) == (110 * calls, 100 * calls, 10 * calls)
    assert http.post("/rooms/acme-room/messages", json={"content": "go"},
                     headers=bearer("acme-admin")
                     ).status_code == 202
    run_ended(http, "acme-viewer", "acme-room")
    follower.join(30)
    assert [frame["data"]["room"] for frame in seen] == ["acme-room", "acme-room"]

    # acme's calls carried its own key; beta's the cluster's.
    assert {r.authorization for r in stub.requests_for("a-agent")} == {f"Bearer {ACME_KEY}"}
    assert {r.authorization for r in stub.requests_for("b-one")} == {f"Bearer {CLUSTER_KEY}"}

    # A token added to the file works after SIGHUP, without a restart.
    assert http.get("/rooms", headers=bearer("beta-viewer")).status_code == 401
    write_tokens(tokens_file, {**TOKENS, "beta-viewer": ("beta", "viewer")})
    server.send_signal(signal.SIGHUP)
    wait_until(lambda: http.get("/rooms", headers=bearer("beta-viewer")).status_code == 200,
               10, "the new token to be known")
    assert [r["room"] for r in http.get("/rooms", headers=bearer("beta-viewer")).json()["rooms"]
            ] == ["beta-room"]
