"""The HTTP API at its edges, on the ASGI app over fakeredis: which Host, Origin and body
type it serves, metrics labels no request can multiply, where a query token counts and how
the access log masks it, numbers and ids past what Redis takes, malformed JSON, and the
dashboard's security headers. (The connection limits are tested against a real process in
tests/e2e/test_api_edges.py.)"""

from __future__ import annotations

import logging
import re

import pytest
from fastapi.testclient import TestClient

from parley.api.server import RedactTokens
from parley.shared.settings import Settings
from tests.support.api import AUTH, TOKEN, app_client, spec_json

JSON = {"Content-Type": "application/json"}


def with_room(api: TestClient, room: str = "r1", **headers: str) -> str:
    reply = api.post("/rooms", json=spec_json(), params={"room": room}, headers=headers)
    assert reply.status_code == 201, reply.text
    return room


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8700", "10.0.0.5:8700",
                                  "localhost.evil.example", "127.0.0.1.nip.io"])
def test_without_tokens_a_host_that_is_not_loopback_is_421(api, host):
    reply = api.get("/rooms", headers={"Host": host})
    assert reply.status_code == 421
    assert reply.json() == {"error": f"Host {host!r} is not served: this API answers loopback "
                            "names only (without PARLEY_API_TOKENS); add the name to "
                            "PARLEY_API_ALLOWED_HOSTS to serve it"}
    assert api.get("/healthz", headers={"Host": host}).status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8700", "localhost:8700",
                                  "LOCALHOST", "[::1]:8700", "dash.localhost:8700"])
def test_without_tokens_loopback_hosts_are_served(api, host):
    assert api.get("/rooms", headers={"Host": host}).status_code == 200


def test_with_tokens_any_host_is_served_until_allowed_hosts_are_set(server):
    with app_client(server, api_tokens=(TOKEN,)) as open_hosts:
        assert open_hosts.get("/rooms", headers={**AUTH, "Host": "api.example"}).status_code == 200
    with app_client(server, api_tokens=(TOKEN,),
                    api_allowed_hosts=("API.example", "10.0.0.5")) as listed:
        assert listed.get("/rooms", headers={**AUTH, "Host": "api.example:443"}).status_code == 200
        assert listed.get("/rooms", headers={**AUTH, "Host": "10.0.0.5"}).status_code == 200
        assert listed.get("/rooms", headers={**AUTH, "Host": "127.0.0.1"}).status_code == 200
        refused = listed.get("/rooms", headers={**AUTH, "Host": "rebound.example"})
        assert refused.status_code == 421 and "PARLEY_API_ALLOWED_HOSTS" in refused.json()["error"]
        # Probes reach the health check by the pod's address.
        assert listed.get("/healthz", headers={"Host": "10.1.2.3:8700"}).status_code == 200


def test_allowed_hosts_must_be_host_names():
    with pytest.raises(ValueError, match="PARLEY_API_ALLOWED_HOSTS: 'http://api.example' is "
                                         "not a host name"):
        Settings(api_allowed_hosts="http://api.example")
    assert Settings(api_allowed_hosts="a.example, [::1]").api_allowed_hosts == ("a.example",
                                                                                "::1")


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:9999", "null",
                                    "https://127.0.0.1.evil.example"])
def test_without_tokens_a_foreign_origin_is_403(api, origin):
    with_room(api)
    reply = api.post("/rooms/r1/archive", params={"remove": "true"}, headers={"Origin": origin})
    assert reply.status_code == 403
    assert reply.json() == {"error": f"Origin {origin!r} is not this API's: without "
                            "PARLEY_API_TOKENS the API refuses cross-site requests"}
    assert api.get("/rooms/r1").status_code == 200


def test_without_tokens_the_apis_own_origin_is_served(api):
    with_room(api, Origin="http://127.0.0.1")
    assert api.post("/rooms/r1/pause", headers={"Origin": "http://127.0.0.1"}).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_without_tokens_a_body_that_is_not_json_is_415(api, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    reply = api.post("/rooms", params={"room": "r1"}, content=b'{"name": "x"}', headers=headers)
    assert reply.status_code == 415
    got = (content_type or "none").partition(";")[0]
    assert reply.json() == {"error": "a request body must be JSON: send Content-Type: "
                            f"application/json (got {got!r})"}
    assert api.get("/rooms/r1").status_code == 404


def test_without_tokens_json_bodies_and_bodiless_posts_are_served(api):
    with_room(api)
    reply = api.post("/rooms/r1/messages", content=b'{"content": "hi"}',
                     headers={"Content-Type": "application/json; charset=utf-8"})
    assert reply.status_code == 202
    assert api.post("/rooms/r1/pause").status_code == 200


def test_with_tokens_origin_and_body_type_are_left_to_the_token(secured):
    reply = secured.post("/rooms", params={"room": "r1"}, headers={
        **AUTH, "Origin": "https://dashboard.example", "Content-Type": "text/plain"},
        json=spec_json())
    assert reply.status_code == 201


def series(text: str, name: str) -> list[str]:
    """The label sets of metric ``name`` in a /metrics text."""
    return re.findall(rf"^{name}\{{(.*)\}} ", text, re.MULTILINE)


def refused_for_token(text: str) -> float:
    """parley_api_refused_total{reason="token"} in a /metrics text (0 before any)."""
    found = re.search(r'^parley_api_refused_total\{reason="token"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_made_up_methods_and_unauthenticated_requests_add_no_metric_series(secured):
    before = secured.get("/metrics", headers=AUTH).text
    for number in range(300):
        secured.request(f"X{number}", f"/nowhere/{number}")
        secured.request(f"Y{number}", "/rooms", headers=AUTH)
    text = secured.get("/metrics", headers=AUTH).text
    methods = {re.search(r'method="([^"]*)"', labels).group(1)
               for labels in series(text, "parley_api_requests_total")}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
    assert 'method="other",route="unmatched",status="405"' in text
    assert len(text) < len(before) + 5000
    assert refused_for_token(text) - refused_for_token(before) == 300
    # Refused before the routes: the 401s are counted as refusals only.
    assert not any('status="401"' in labels for labels in series(text, "parley_api_requests_total"))


def test_the_query_token_counts_on_the_event_stream_routes_only(secured):
    with_room(secured, "events", **AUTH)
    query = {"access_token": TOKEN}
    deleted = secured.delete("/rooms/events", params=query)
    assert deleted.status_code == 401 and deleted.json() == {
        "error": "missing bearer token: send Authorization: Bearer <token>"}
    assert secured.get("/rooms/events", params=query).status_code == 401
    assert secured.post("/rooms/events/archive", params=query).status_code == 401
    assert secured.get("/rooms/events", headers=AUTH).status_code == 200
    # A stream route takes it (past auth, this one is a 404).
    assert secured.get("/rooms/nope/events", params=query).status_code == 404
    assert secured.get("/events", params={"access_token": "x"}).status_code == 401


@pytest.mark.parametrize("path", [
    f"/events?access_token={TOKEN}", f"/events?after=1-0&access_%74oken={TOKEN}",
    f"/events?%61ccess%5F%74oken={TOKEN}",
    f"/events?after=1-0;access_token={TOKEN}", f"/events?ACCESS_TOKEN={TOKEN}&x=1",
    f"/events?access_token={TOKEN};{TOKEN}", f"/events?access+token={TOKEN}"])
def test_a_query_token_is_masked_in_the_access_log_in_every_spelling(path):
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", path, "1.1", 200), None)
    assert RedactTokens().filter(record)
    assert TOKEN not in record.getMessage() and "=***" in record.getMessage()


@pytest.mark.parametrize("value", ["99999999999999999999", "18446744073709551616-0",
                                   "1-18446744073709551616"])
def test_an_event_id_past_64_bits_is_400(api, value):
    with_room(api)
    for path in ("/rooms/r1/events", "/events"):
        header = api.get(path, headers={"Last-Event-ID": value})
        assert header.status_code == 400, path
        assert header.json()["error"].startswith(f"Last-Event-ID {value!r} is not an event id")
        query = api.get(path, params={"after": value})
        assert query.status_code == 400 and query.json()["error"].startswith("after ")


@pytest.mark.parametrize(("path", "name"), [("/rooms/r1/messages", "after_seq"),
                                            ("/rooms/r1/turns", "last")])
@pytest.mark.parametrize("value", [2**63, 2**64, 10**30])
def test_a_count_or_seq_past_what_redis_takes_is_422(api, path, name, value):
    with_room(api)
    reply = api.get(path, params={name: value})
    assert (reply.status_code, reply.json()) == (422, {
        "error": f"query.{name}: Input should be less than or equal to 9223372036854775807"})
    assert api.get(path, params={name: 2**63 - 1}).status_code == 200


def test_archiving_a_room_with_an_overlong_id_is_400(api):
    reply = api.post(f"/rooms/{'a' * 5000}/archive")
    assert reply.status_code == 400
    assert reply.json()["error"].startswith("invalid room id 'aaaa")


def test_malformed_json_in_a_post_is_400(api):
    with_room(api)
    reply = api.post("/rooms/r1/messages", content=b'{"content": ', headers=JSON)
    assert (reply.status_code, reply.json()) == (400, {
        "error": "the body is not valid JSON: Expecting value at char 12"})


def test_every_answer_forbids_framing_sniffing_and_foreign_scripts(secured):
    for reply in (secured.get("/"), secured.get("/static/app.js"), secured.get("/rooms")):
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
        policy = reply.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy


def test_the_dashboards_api_link_goes_to_something_that_exists(secured):
    [link] = re.findall(r'<a href="([^"]+)" class="docs"', secured.get("/").text)
    assert secured.get(link, headers=AUTH).status_code == 200
