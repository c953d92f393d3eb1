"""Health checks and metrics of the coordinator and worker processes, over HTTP from a
small stdlib server on a daemon thread (``parley coordinator|worker --health-port P``):

===========  ==================================================================
GET /livez   200 while the process's own loop goes round (the coordinator's
             scheduler, the worker's Celery consumer), else 503
GET /readyz  200 when Redis and the broker answer and the loop runs (not stuck,
             not reconnecting; a coordinator's scans not failing round after round),
             else 503 with a JSON body naming what is down
GET /metrics the process's Prometheus metrics (shared/metrics.py)
===========  ==================================================================

``parley health`` is the same check as an exec probe (``probe``).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kombu
import redis
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

import parley.shared.metrics  # noqa: F401 - parley's metrics are listed from the first scrape on
from parley.shared.connections import broker_use_ssl, redis_kwargs
from parley.shared.logs import one_line
from parley.shared.settings import Settings

log = structlog.get_logger("parley.health")

COORDINATOR_PORT = 8701
WORKER_PORT = 8702
# A readiness check gives Redis and the broker this long each to answer.
PING_TIMEOUT_S = 1.0
# `parley health` waits this long for the process to answer.
PROBE_TIMEOUT_S = 5.0
# Addresses a server binds to that a probe on the same host reaches on loopback.
ANY_ADDRESS = {"", "0.0.0.0", "::"}

# A readiness check: returns when the dependency answers, raises otherwise.
Check = Callable[[], object]


# What to change when the health port is taken, said with the error.
PORT_FIX = "choose another port with --health-port or PARLEY_HEALTH_PORT (0: no health server)"


class HealthPortError(OSError):
    """The health port that was asked for cannot be served (in use, not allowed)."""


class Liveness:
    """When a process's own loop last went round. Live while that was recent, or while
    the loop is (re)connecting: waiting on a lost dependency is readiness's concern."""

    def __init__(self, stale_after_s: float, connecting: bool = False) -> None:
        self.stale_after_s = stale_after_s
        self.at = time.monotonic()
        self.connecting = connecting

    def tick(self) -> None:
        """The loop went round."""
        self.at = time.monotonic()
        self.connecting = False

    def reconnect(self) -> None:
        """The loop stopped to (re)connect; it ticks again once it runs."""
        self.connecting = True

    def age_s(self) -> float:
        """Seconds since the loop last went round."""
        return time.monotonic() - self.at

    def live(self) -> bool:
        """True while the loop goes round (or is connecting)."""
        return self.connecting or self.age_s() < self.stale_after_s


class RoundsFailing(Exception):
    """A process's loop goes round, but its rounds keep failing: it does nothing."""


class FailedRounds:
    """How many rounds of a process's loop failed in a row, and how the last one did. A
    loop whose every round fails is live (it goes round) but not ready."""

    def __init__(self, what: str, most: int) -> None:
        self.what = what
        self.most = most
        self.in_a_row = 0
        self.last_error = ""

    def failed(self, error: str) -> None:
        """One more round failed with ``error`` (one line)."""
        self.in_a_row += 1
        self.last_error = error

    def succeeded(self) -> None:
        """A round went through."""
        self.in_a_row = 0
        self.last_error = ""

    def failing(self) -> bool:
        """True once ``most`` rounds in a row failed."""
        return self.in_a_row >= self.most

    def describe(self) -> str:
        """``<n> <what> in a row failed, the last with <error>``."""
        return f"{self.in_a_row} {self.what} in a row failed, the last with {self.last_error}"

    def check(self) -> None:
        """A readiness check: raise RoundsFailing once ``most`` rounds in a row failed."""
        if self.failing():
            raise RoundsFailing(self.describe())


class Probes:
    """What the endpoints answer, from the process's liveness and its readiness checks."""

    def __init__(self, liveness: Liveness, checks: dict[str, Check]) -> None:
        self.liveness = liveness
        self.checks = checks

    def livez(self) -> tuple[int, dict[str, Any]]:
        """The liveness answer: status code and JSON body."""
        live = self.liveness.live()
        body: dict[str, Any] = {"live": live, "loop_age_s": round(self.liveness.age_s(), 3)}
        if self.liveness.connecting:
            body["connecting"] = True
        return (200 if live else 503), body

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """The readiness answer: 200 when every check passes, else 503 naming what is down."""
        results = {name: failure(check) for name, check in self.checks.items()}
        if self.liveness.connecting:
            # A worker's consumer takes no task until it has (re)connected to its broker.
            results["loop"] = "connecting"
        elif not self.liveness.live():
            results["loop"] = f"did not go round for {self.liveness.age_s():.1f}s"
        down = sorted(name for name, problem in results.items() if problem)
        body: dict[str, Any] = {"ready": not down,
                                "checks": {name: problem or "ok" for name, problem in results.items()}}
        if down:
            body["down"] = down
        return (503 if down else 200), body


def failure(check: Check) -> str:
    """What is wrong with the check's dependency, or "" when it answers."""
    try:
        check()
    except Exception as error:  # noqa: BLE001 - whatever it raised, the dependency is down
        return one_line(f"{type(error).__name__}: {error}", 200)
    return ""


def readiness_checks(settings: Settings) -> dict[str, Check]:
    """Redis and the broker, each pinged with a short timeout on every readiness check."""
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=PING_TIMEOUT_S,
                                  socket_connect_timeout=PING_TIMEOUT_S, **redis_kwargs(settings))
    return {"redis": client.ping, "broker": lambda: ping_broker(settings)}


def ping_broker(settings: Settings) -> None:
    """Connect to the broker once (a Redis broker is pinged on connect); raise if it does
    not answer."""
    timeouts = {"socket_connect_timeout": PING_TIMEOUT_S, "socket_timeout": PING_TIMEOUT_S}
    with kombu.Connection(settings.broker_url, connect_timeout=PING_TIMEOUT_S,
                          ssl=broker_use_ssl(settings) or False,
                          transport_options=timeouts) as connection:
        connection.ensure_connection(max_retries=0)


class HealthHandler(BaseHTTPRequestHandler):
    """GET /livez, /readyz and /metrics from the server's ``probes``."""

    server: HealthServer

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        """Answer one of the three paths; 404 naming the paths for any other."""
        path = self.path.split("?", 1)[0]
        if path == "/livez":
            self.send_json(*self.server.probes.livez())
        elif path == "/readyz":
            self.send_json(*self.server.probes.readyz())
        elif path == "/metrics":
            self.send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        else:
            self.send_json(404, {"error": f"no such path {path}: try /livez, /readyz, /metrics"})

    def send_json(self, status: int, body: dict[str, Any]) -> None:
        """Send ``body`` as JSON."""
        self.send(status, json.dumps(body).encode(), "application/json")

    def send(self, status: int, body: bytes, content_type: str) -> None:
        """Send one complete response."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Probes come every few seconds: not one log line each."""


class HealthServer(ThreadingHTTPServer):
    """The health server; its handler threads never hold the process up at exit."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], probes: Probes) -> None:
        super().__init__(address, HealthHandler)
        self.probes = probes

    def start(self) -> HealthServer:
        """Serve from a daemon thread."""
        threading.Thread(target=self.serve_forever, name="health-server", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port."""
        self.shutdown()
        self.server_close()


def start_health_server(probes: Probes, settings: Settings, default_port: int,
                        port: int | None = None) -> HealthServer | None:
    """Serve the probes on ``port`` (else the settings' health_port, else ``default_port``;
    0 is off). A port asked for that cannot be bound raises HealthPortError; the default
    port taken (by another process on the host) is logged and the process runs without."""
    asked = port if port is not None else settings.health_port
    chosen = default_port if asked is None else asked
    if not chosen:
        return None
    try:
        server = HealthServer((settings.health_host, chosen), probes).start()
    except OSError as error:
        if asked is not None:
            raise HealthPortError(f"cannot serve health checks on {settings.health_host}:"
                                  f"{chosen}: {error.strerror or error}; {PORT_FIX}"
                                  ) from error
        log.warning("health_port_unavailable", host=settings.health_host, port=chosen,
                    error=error.strerror or str(error), fix=PORT_FIX)
        return None
    log.info("health_serving", host=settings.health_host, port=server.server_address[1])
    return server


def probe_host(settings: Settings, host: str | None = None) -> str:
    """Where a probe on this host reaches the process: ``host``, else the settings'
    health_host (loopback when the server binds every address)."""
    if host:
        return host
    return "127.0.0.1" if settings.health_host in ANY_ADDRESS else settings.health_host


def probe(host: str, ports: list[int], ready: bool = False) -> tuple[bool, str]:
    """Ask the process on the first of ``ports`` that answers whether it is live (ready):
    (ok, one line saying why)."""
    path = "/readyz" if ready else "/livez"
    unreachable = []
    for port in ports:
        try:
            status, body = http_get(host, port, path)
        except OSError as error:
            unreachable.append(f"{host}:{port} ({error.strerror or type(error).__name__})")
            continue
        return status == 200, describe_answer(f"{host}:{port}", ready, status, body)
    return False, f"not {'ready' if ready else 'live'}: nothing answers on {', '.join(unreachable)}"


def http_get(host: str, port: int, path: str) -> tuple[int, bytes]:
    """GET ``path`` from ``host:port`` directly (no proxy): status and body."""
    connection = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def describe_answer(where: str, ready: bool, status: int, body: bytes) -> str:
    """One line for a probe's answer: what the process says of itself."""
    state = "ready" if ready else "live"
    try:
        answer = json.loads(body)
    except ValueError:
        return f"not {state}: {where} answered {status} {one_line(body.decode(errors='replace'), 200)}"
    if ready:
        checks = ", ".join(f"{name} {problem}" for name, problem in answer.get("checks", {}).items())
        return f"{'' if status == 200 else 'not '}{state}: {where}: {checks}"
    age = answer.get("loop_age_s")
    return (f"{'' if status == 200 else 'not '}{state}: {where}: loop went round {age}s ago"
            + (" (connecting)" if answer.get("connecting") else ""))
