"""Access through the API on fakeredis: the tokens file's identities, the role each route
needs, and another organization's rooms reading as absent."""

from __future__ import annotations

import json
import os

import fakeredis
import pytest
from starlette.routing import Route
from typer.testing import CliRunner

from parley import cli
from parley.api.access import ROUTE_ROLES, TokensFileError, digest, read_tokens_file
from parley.shared.organizations import read_limits
from tests.support.api import TOKEN, app_client, spec_json

TOKENS = {"acme-viewer": ("acme", "viewer"), "acme-operator": ("acme", "operator"),
          "acme-admin": ("acme", "admin"), "beta-admin": ("beta", "admin"),
          "root": ("default", "cluster-admin")}
LIMITS = {"beta": {"max_live_rooms": 1, "max_tokens_per_day": 500}}


def bearer(token: str) -> dict[str, str]:
    """The header of ``token``."""
    return {"Authorization": f"Bearer {token}"}


def write_tokens(path, tokens=TOKENS, organizations=LIMITS) -> None:
    """A tokens file of ``tokens`` (token: (organization, role)) and limits."""
    entries = [{"sha256": digest(token), "organization": org, "role": role, "name": token}
               for token, (org, role) in tokens.items()]
    path.write_text(json.dumps({"tokens": entries, "organizations": organizations}))


@pytest.fixture
def tokens_file(tmp_path):
    path = tmp_path / "tokens.json"
    write_tokens(path)
    return path


@pytest.fixture
def api(server, tokens_file):
    with app_client(server, api_tokens_file=str(tokens_file), api_tokens=(TOKEN,)) as client:
        yield client


def create(api, token: str, room: str) -> int:
    """Create ``room`` as ``token``; its status."""
    return api.post("/rooms", json=spec_json(), params={"room": room},
                    headers=bearer(token)).status_code


def test_every_route_of_the_app_has_a_least_role_in_the_table(server):
    app = app_client(server).app
    open_paths = {"/healthz", "/"}
    routes = {(method, route.path) for route in every_route(app) for method in route.methods
              if method != "HEAD" and route.path not in open_paths}
    assert len(routes) >= 25  # the included routers' routes were walked too
    assert routes - set(ROUTE_ROLES) == set()


def every_route(app) -> list[Route]:
    """The app's routes, those of its included routers too."""
    found = [route for route in app.routes if isinstance(route, Route)]
    for route in app.routes:
        found += [inner for inner in getattr(getattr(route, "original_router", None), "routes", [])
                  if isinstance(inner, Route)]
    return found


def test_a_room_belongs_to_the_creators_organization_and_lists_only_there(api):
    assert create(api, "acme-admin", "a1") == 201
    assert create(api, "beta-admin", "b1") == 201
    assert api.get("/rooms/a1", headers=bearer("acme-viewer")).json()["organization"] == "acme"
    assert [r["room"] for r in api.get("/rooms", headers=bearer("acme-viewer")).json()["rooms"]
            ] == ["a1"]
    assert [r["room"] for r in api.get("/rooms", headers=bearer("beta-admin")).json()["rooms"]
            ] == ["b1"]
    everyone = api.get("/rooms", headers=bearer("root")).json()["rooms"]
    assert {r["room"] for r in everyone} == {"a1", "b1"}
    chosen = api.get("/rooms", params={"org": "beta"}, headers=bearer("root")).json()["rooms"]
    assert [r["room"] for r in chosen] == ["b1"]
    # Another organization's token cannot choose: it sees its own.
    assert [r["room"] for r in api.get("/rooms", params={"org": "beta"},
                                       headers=bearer("acme-viewer")).json()["rooms"]] == ["a1"]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/rooms/b1", None), ("GET", "/rooms/b1/spec", None),
    ("GET", "/rooms/b1/messages", None), ("GET", "/rooms/b1/turns", None),
    ("GET", "/rooms/b1/approvals", None), ("GET", "/rooms/b1/events", None),
    ("POST", "/rooms/b1/messages", {"content": "hi"}),
    ("POST", "/rooms/b1/approvals/abc", {"approve": True}),
    ("POST", "/rooms/b1/cancel", None), ("POST", "/rooms/b1/pause", None),
    ("POST", "/rooms/b1/archive", None), ("DELETE", "/rooms/b1", None),
    ("GET", "/dashboard/rooms/b1/stats", None),
    ("POST", "/rooms/b1/agents/agent0/listen", None), ("GET", "/rooms/b1/replay?threshold=0.7", None),
])
def test_another_organizations_room_answers_as_a_missing_one(api, method, path, body):
    assert create(api, "beta-admin", "b1") == 201
    theirs = api.request(method, path, json=body, headers=bearer("acme-admin"))
    missing = api.request(method, path.replace("b1", "nope"), json=body,
                          headers=bearer("acme-admin"))
    assert theirs.status_code == 404
    assert theirs.json() == {"error": "no room 'b1'"}
    assert missing.json() == {"error": "no room 'nope'"}
    assert api.get("/rooms/b1", headers=bearer("beta-admin")).status_code == 200


@pytest.mark.parametrize(("token", "method", "path", "needed"), [
    ("acme-viewer", "POST", "/rooms/a1/messages", "operator"),
    ("acme-viewer", "POST", "/rooms/a1/cancel", "operator"),
    ("acme-operator", "DELETE", "/rooms/a1", "admin"),
    ("acme-operator", "POST", "/rooms", "admin"),
    ("acme-admin", "GET", "/coordinators", "cluster-admin"),
    ("acme-admin", "GET", "/workers", "cluster-admin"),
    ("acme-admin", "GET", "/metrics", "cluster-admin"),
])
def test_a_role_is_refused_what_it_may_not_do_naming_the_role_needed(api, token, method, path,
                                                                      needed):
    assert create(api, "acme-admin", "a1") == 201
    reply = api.request(method, path, json={"content": "hi"} if method == "POST" else None,
                        headers=bearer(token))
    assert reply.status_code == 403
    assert reply.json()["error"].endswith(f"it needs {needed} or above")


def test_an_operator_posts_and_a_cluster_token_of_api_tokens_reads_every_organization(api):
    assert create(api, "acme-admin", "a1") == 201
    assert api.post("/rooms/a1/messages", json={"content": "go"},
                    headers=bearer("acme-operator")).status_code == 202
    assert api.get("/rooms/a1", headers=bearer(TOKEN)).status_code == 200
    assert api.get("/coordinators", headers=bearer(TOKEN)).status_code == 200


def test_an_operator_changes_a_mention_rooms_floor_and_a_viewer_may_not(api):
    spec = spec_json()
    spec["policy"] = {"kind": "mention"}
    assert api.post("/rooms", json=spec, params={"room": "m1"},
                    headers=bearer("acme-admin")).status_code == 201
    changed = api.post("/rooms/m1/agents/agent0/listen", headers=bearer("acme-operator"))
    assert (changed.status_code, changed.json()["change"]) == (200, "listen")
    assert api.post("/rooms/m1/agents/agent0/instruct", json={"text": "sum up"},
                    headers=bearer("acme-operator")).status_code == 200
    assert api.post("/rooms/m1/agents/agent0/talk",
                    headers=bearer("acme-viewer")).status_code == 403


def test_an_organization_at_its_max_live_rooms_is_refused_a_room(api):
    assert create(api, "beta-admin", "b1") == 201
    reply = api.post("/rooms", json=spec_json(), params={"room": "b2"},
                     headers=bearer("beta-admin"))
    assert (reply.status_code, reply.json()["error"]) == (
        409, "organization beta has 1 rooms, its max_live_rooms is 1: delete or archive "
             "one first")
    assert create(api, "acme-admin", "a2") == 201  # no limit for acme


def test_loading_the_file_writes_the_limits_for_the_coordinators(api, server):
    limits = read_limits(fakeredis.FakeRedis(server=server), api.app.state.client.store.keys,
                         "beta")
    assert (limits.max_live_rooms, limits.max_tokens_per_day) == (1, 500)


def test_the_file_is_read_again_when_it_changes_and_on_sighup(api, tokens_file):
    assert api.get("/rooms", headers=bearer("newcomer")).status_code == 401
    write_tokens(tokens_file, {**TOKENS, "newcomer": ("acme", "viewer")})
    stat = os.stat(tokens_file)
    os.utime(tokens_file, (stat.st_atime, stat.st_mtime + 10))
    api.app.state.identities._checked = 0.0  # past the once-a-second look
    assert api.get("/rooms", headers=bearer("newcomer")).status_code == 200
    write_tokens(tokens_file, {"root": ("default", "cluster-admin")})
    os.utime(tokens_file, (stat.st_atime, stat.st_mtime + 10))  # same mtime: only SIGHUP
    api.app.state.identities.reload_soon()
    assert api.get("/rooms", headers=bearer("newcomer")).status_code == 401


def test_a_file_that_no_longer_reads_keeps_the_tokens_loaded(api, tokens_file):
    tokens_file.write_text("tokens: [{sha256: nothex, role: viewer}]")
    api.app.state.identities.reload_soon()
    assert api.get("/rooms", headers=bearer("acme-viewer")).status_code == 200


@pytest.mark.parametrize(("text", "says"), [
    ("tokens: [{sha256: abc, role: viewer}]", "tokens.0.sha256"),
    ('{"tokens": [{"sha256": "' + "a" * 64 + '", "role": "boss"}]}', "tokens.0.role"),
    ('{"tokens": [], "token": []}', "token: Extra inputs are not permitted"),
    ('{"tokens": [{"sha256": "' + "a" * 64 + '", "role": "viewer", "organization": "A!"}]}',
     "invalid organization"),
])
def test_a_bad_tokens_file_is_one_error_naming_the_field(tmp_path, text, says):
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(TokensFileError, match="PARLEY_API_TOKENS_FILE") as error:
        read_tokens_file(path)
    assert says in str(error.value)


def test_import_refuses_another_organizations_archive_unless_cluster_admin(api):
    assert create(api, "beta-admin", "b1") == 201
    archive = api.post("/rooms/b1/archive", headers=bearer("beta-admin")).content
    assert b'"organization": "beta"' in archive or b'"organization":"beta"' in archive
    refused = api.post("/rooms/import", params={"room": "b9"}, content=archive,
                       headers=bearer("acme-admin"))
    assert refused.status_code == 403
    assert "organization beta" in refused.json()["error"]
    done = api.post("/rooms/import", params={"room": "b9"}, content=archive,
                    headers=bearer("root"))
    assert done.status_code == 201
    assert api.get("/rooms/b9", headers=bearer("beta-admin")).json()["organization"] == "beta"


def test_token_new_prints_a_token_whose_digest_is_the_entry(tmp_path):
    result = CliRunner().invoke(cli.app, ["token", "new", "--org", "acme", "--role",
                                          "operator", "--json"])
    assert result.exit_code == 0, result.output
    made = json.loads(result.output)
    assert made["entry"] == {"sha256": digest(made["token"]), "organization": "acme",
                             "role": "operator", "name": ""}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"tokens": [made["entry"]]}))
    assert read_tokens_file(path).tokens[0].organization == "acme"

