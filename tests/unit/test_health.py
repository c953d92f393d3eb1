"""The health endpoints and the exec probe: liveness from the process's own loop, readiness
from its dependencies, served by the stdlib server; no Redis needed."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator

import pytest
import structlog
from typer.testing import CliRunner

from parley import cli
from parley.shared.health import (
    HealthPortError,
    HealthServer,
    Liveness,
    Probes,
    http_get,
    probe,
    readiness_checks,
    start_health_server,
)
from parley.shared.settings import Settings


def down() -> None:
    raise ConnectionError("Connection refused")


def stale(liveness: Liveness, seconds: float) -> Liveness:
    liveness.at -= seconds
    return liveness


@pytest.fixture
def serve() -> Iterator:
    """Start a health server on a free port for the test; stopped afterwards."""
    servers: list[HealthServer] = []

    def start(probes: Probes) -> int:
        servers.append(HealthServer(("127.0.0.1", 0), probes).start())
        return servers[-1].server_address[1]

    yield start
    for server in servers:
        server.stop()


def test_a_loop_that_ticked_recently_is_live_and_one_that_stopped_is_not():
    liveness = Liveness(stale_after_s=30)
    assert liveness.live()
    assert not stale(liveness, 31).live()
    liveness.tick()
    assert liveness.live()


def test_a_loop_that_is_connecting_counts_as_live_until_it_runs_again():
    liveness = stale(Liveness(stale_after_s=30), 120)
    liveness.reconnect()
    assert liveness.live()
    liveness.tick()
    assert not liveness.connecting


def test_ready_when_every_check_passes():
    status, body = Probes(Liveness(30), {"redis": lambda: True, "broker": lambda: None}).readyz()

    assert status == 200
    assert body == {"ready": True, "checks": {"redis": "ok", "broker": "ok"}}


def test_not_ready_names_what_is_down_and_why():
    status, body = Probes(Liveness(30), {"redis": lambda: True, "broker": down}).readyz()

    assert status == 503
    assert body["down"] == ["broker"]
    assert body["checks"] == {"redis": "ok", "broker": "ConnectionError: Connection refused"}


def test_a_stuck_loop_is_neither_live_nor_ready():
    probes = Probes(stale(Liveness(30), 45), {"redis": lambda: True})

    assert probes.livez()[0] == 503
    status, body = probes.readyz()
    assert (status, body["down"]) == (503, ["loop"])


def test_a_loop_still_connecting_is_live_but_not_ready():
    probes = Probes(Liveness(30, connecting=True), {"broker": lambda: True})

    status, body = probes.livez()
    assert (status, body["live"], body["connecting"]) == (200, True, True)
    assert probes.readyz() == (503, {"ready": False, "down": ["loop"],
                                     "checks": {"broker": "ok", "loop": "connecting"}})


def test_the_readiness_checks_name_an_unreachable_redis_and_broker():
    closed = f"redis://127.0.0.1:{closed_port()}/0"
    checks = readiness_checks(Settings(redis_url=closed, broker_url=closed))

    status, body = Probes(Liveness(30), checks).readyz()

    assert (status, body["down"]) == (503, ["broker", "redis"])
    assert "refused" in body["checks"]["redis"].lower()


def test_the_server_answers_livez_readyz_metrics_and_names_its_paths(serve):
    port = serve(Probes(Liveness(30), {"redis": down}))

    live_status, live = http_get("127.0.0.1", port, "/livez")
    ready_status, ready = http_get("127.0.0.1", port, "/readyz")
    metrics_status, metrics = http_get("127.0.0.1", port, "/metrics")
    other_status, other = http_get("127.0.0.1", port, "/nope")

    assert (live_status, json.loads(live)["live"]) == (200, True)
    assert (ready_status, json.loads(ready)["down"]) == (503, ["redis"])
    assert metrics_status == 200 and b"parley_turns_total" in metrics
    assert other_status == 404 and "/livez" in json.loads(other)["error"]


def test_a_health_port_asked_for_and_taken_stops_the_process(serve):
    port = serve(Probes(Liveness(30), {}))

    with pytest.raises(HealthPortError) as raised:
        start_health_server(Probes(Liveness(30), {}), Settings(health_port=port), 1)
    assert str(raised.value) == (
        f"cannot serve health checks on 127.0.0.1:{port}: Address already in use; choose "
        "another port with --health-port or PARLEY_HEALTH_PORT (0: no health server)")


def test_the_default_health_port_taken_is_logged_and_the_process_runs_on(serve):
    taken = serve(Probes(Liveness(30), {}))

    with structlog.testing.capture_logs() as logs:
        server = start_health_server(Probes(Liveness(30), {}), Settings(), taken)

    assert server is None
    assert [e["port"] for e in logs if e["event"] == "health_port_unavailable"] == [taken]


def test_port_zero_turns_the_server_off():
    assert start_health_server(Probes(Liveness(30), {}), Settings(health_port=0), 8701) is None


def test_the_probe_says_why_in_one_line(serve):
    port = serve(Probes(Liveness(30), {"redis": lambda: True, "broker": down}))

    ok, line = probe("127.0.0.1", [port])
    assert ok
    assert re.fullmatch(rf"live: 127\.0\.0\.1:{port}: loop went round [0-9.]+s ago", line)
    ok, line = probe("127.0.0.1", [port], ready=True)
    assert not ok
    assert line == (f"not ready: 127.0.0.1:{port}: redis ok, broker ConnectionError: "
                    "Connection refused")


def test_the_probe_tries_the_next_port_when_nothing_answers_on_one(serve):
    port = serve(Probes(Liveness(30), {}))
    closed = closed_port()

    assert probe("127.0.0.1", [closed, port])[0]
    ok, line = probe("127.0.0.1", [closed])
    assert not ok and line.startswith(f"not live: nothing answers on 127.0.0.1:{closed}")


def test_parley_health_exits_0_when_live_and_1_when_not_ready(serve, monkeypatch):
    monkeypatch.delenv("PARLEY_HEALTH_PORT", raising=False)
    port = serve(Probes(Liveness(30), {"broker": down}))

    live = CliRunner().invoke(cli.app, ["health", "--port", str(port)])
    ready = CliRunner().invoke(cli.app, ["health", "--port", str(port), "--ready"])
    gone = CliRunner().invoke(cli.app, ["health", "--port", str(closed_port()), "--ready"])

    assert (live.exit_code, live.stdout.startswith("live: ")) == (0, True)
    assert ready.exit_code == 1 and ready.stderr.startswith("not ready: ")
    assert gone.exit_code == 1 and "nothing answers" in gone.stderr
    assert all(len(r.output.splitlines()) == 1 for r in (live, ready, gone))


def closed_port() -> int:
    """A port nothing listens on (bound and closed at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
