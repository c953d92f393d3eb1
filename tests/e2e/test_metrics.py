"""Metrics, health checks and JSON logs of real coordinator and worker processes: a room
runs, both processes' /metrics are scraped and checked against its turn records; their
readiness goes to 503 while their Redis is down, and back; `parley health` answers as an
exec probe; and every line either process writes is a JSON object, Celery's included."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from parley.client import Client
from parley.processes import ProcessGroup, free_port, parley_command
from parley.shared.health import http_get
from parley.shared.models import RoomSpec, StopReason, TurnRecord
from tests.chaos.harness import PrivateRedis, logs_on_failure, parley_env
from tests.e2e.test_bid_room import SCRIPTS
from tests.support.openai_stub import OpenAIStub, tool_call
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
PRICED_MODEL = "openai/gpt-4o-mini"  # litellm's cost map prices it: the answers cost money
ANALYST_TOKENS = [(50, 5), (60, 6), (70, 7), (80, 8)]
# The worker imports litellm on its first real call (preloading is off in tests): seconds.
BID_TIMEOUT_S = 60

Samples = dict[tuple[str, frozenset], float]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """The stub provider; the Analyst's four bids are silent, with known token counts."""
    with OpenAIStub(api_key=KEY) as server:
        server.script("gpt-4o-mini", *(tool_call(0.1, "", prompt_tokens=prompt,
                                                 completion_tokens=completion)
                                       for prompt, completion in ANALYST_TOKENS))
        yield server


def metered_room(stub: OpenAIStub, queue: str) -> RoomSpec:
    """test_bid_room's scripted room (a scripted error, an answer without a tool call)
    with a priced LLM agent on the stub that never wants the floor."""
    scripted = [{"name": name, "model": "scripted", "script": script, "queue": queue}
                for name, script in SCRIPTS.items()]
    analyst = {"name": "Analyst", "model": PRICED_MODEL, "api_base": stub.url,
               "api_key_env": KEY_ENV, "queue": queue}
    return RoomSpec.model_validate({"name": "metered", "agents": [*scripted, analyst],
                                   "policy": {"kind": "bid", "bid_timeout_s": BID_TIMEOUT_S}})


def scrape(port: int) -> Samples:
    """Every sample of the process's /metrics, by name and labels."""
    status, body = http_get("127.0.0.1", port, "/metrics")
    assert status == 200
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def labelled(samples: Samples, name: str, label: str) -> dict[str, float]:
    """A metric's samples by one label's value (the metric has that one label)."""
    return {dict(labels)[label]: amount for (sample, labels), amount in samples.items()
            if sample == name and amount}


def answers(samples: Samples) -> dict[tuple[str, str], float]:
    """parley_answers_total by (kind, status), the zeros left out."""
    return {(dict(labels)["kind"], dict(labels)["status"]): amount
            for (name, labels), amount in samples.items()
            if name == "parley_answers_total" and amount}


def recorded_answers(turns: list[TurnRecord]) -> dict[tuple[str, str], float]:
    return dict(Counter((bid.kind.value, bid.status.value) for t in turns for bid in t.bids))


def answer_of(port: int, path: str) -> tuple[int, dict]:
    status, body = http_get("127.0.0.1", port, path)
    return status, json.loads(body)


def status_of(port: int, path: str) -> int:
    """The path's status; 0 while nothing answers on the port yet."""
    try:
        return http_get("127.0.0.1", port, path)[0]
    except OSError:
        return 0


def parley_health(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(parley_command("health", *args), capture_output=True, text=True,
                          timeout=60)


def every_line_is_json(group: ProcessGroup) -> list[dict]:
    """Every line each process wrote (stdout and stderr), parsed; fails naming the first
    line that is not JSON."""
    parsed = []
    for path in group.logs.values():
        for line in path.read_text(errors="replace").splitlines():
            try:
                parsed.append(json.loads(line))
            except ValueError:
                pytest.fail(f"{path.name} wrote a line that is not JSON: {line!r}")
    return parsed


def test_a_rooms_turns_and_answers_are_counted_by_the_coordinator_and_the_worker(
        processes, settings, queue, stub):
    coordinator_port, worker_port = free_port(), free_port()
    processes.worker("-Q", queue, "-c", "8", "--health-port", str(worker_port),
                     env={KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
                          "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator("--health-port", str(coordinator_port))
    for port in (coordinator_port, worker_port):
        wait_until(lambda port=port: status_of(port, "/readyz") == 200, 60,
                   f"the process on {port} to be ready")
    assert parley_health("--port", str(coordinator_port), "--ready").returncode == 0

    result = Client(settings).run(metered_room(stub, queue), "Launch next week?",
                                  timeout_s=120)
    turns = Client(settings).turns(result.room)

    assert (result.stop_reason, len(turns)) == (StopReason.LULL, 4)
    recorded = recorded_answers(turns)
    coordinator = scrape(coordinator_port)
    assert value(coordinator, "parley_turns_total", organization="default") == len(turns)
    assert value(coordinator, "parley_turn_seconds_count", organization="default") == len(turns)
    assert value(coordinator, "parley_turn_added_seconds_count",
                 organization="default") == len(turns)  # no timeouts
    assert answers(coordinator) == recorded
    failed = Counter(bid.error_kind.value for t in turns for bid in t.bids if bid.error_kind)
    assert labelled(coordinator, "parley_failures_total", "kind") == failed
    assert set(failed) == {"scripted", "no_tool_call"}
    assert value(coordinator, "parley_timeouts_total", organization="default") == 0
    for name in ("parley_takeovers_total", "parley_lease_losses_total"):
        assert value(coordinator, name) == 0, name
    wait_until(lambda: not labelled(scrape(coordinator_port), "parley_rooms_held", "coordinator"),
               30, "the coordinator to hold no room once the room went idle")

    # The worker counts each answer as it writes it, just after the coordinator may see it.
    wait_until(lambda: answers(scrape(worker_port)) == recorded, 30,
               "the worker's answers to match the recorded ones")
    worker = scrape(worker_port)
    analyst = [bid for t in turns for bid in t.bids if bid.agent == "Analyst"]
    prompt = value(worker, "parley_tokens_total", organization="default", model=PRICED_MODEL,
                   direction="prompt")
    completion = value(worker, "parley_tokens_total", organization="default", model=PRICED_MODEL,
                       direction="completion")
    assert (prompt, completion) == tuple(map(sum, zip(*ANALYST_TOKENS, strict=True)))
    assert value(worker, "parley_cost_usd_total", organization="default",
                 model=PRICED_MODEL) == pytest.approx(sum(bid.cost_usd for bid in analyst))
    assert sum(bid.cost_usd for bid in analyst) > 0
    assert value(worker, "parley_tokens_total", organization="default", model="scripted",
                 direction="prompt") == 0
    assert labelled(worker, "parley_failures_total", "kind") == failed

    processes.stop_all()
    lines = every_line_is_json(processes)
    assert any(line.get("logger", "").startswith("celery") for line in lines)
    assert any(line["event"] == "coordinator_stopped" for line in lines)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_readiness_follows_redis_while_liveness_holds_and_parley_health_says_so(
        tmp_path: Path, prefix: str):
    coordinator_port, worker_port = free_port(), free_port()
    with PrivateRedis(tmp_path) as server, \
            ProcessGroup(tmp_path, parley_env(server.url, prefix)) as group, \
            logs_on_failure(group):
        group.worker("--health-port", str(worker_port))
        group.coordinator("--health-port", str(coordinator_port))
        for port in (coordinator_port, worker_port):
            wait_until(lambda port=port: status_of(port, "/readyz") == 200, 60,
                       f"the process on {port} to be ready")

        server.stop()
        for port in (coordinator_port, worker_port):
            wait_until(lambda port=port: status_of(port, "/readyz") == 503, 30,
                       f"the process on {port} to say it is not ready")
            status, body = answer_of(port, "/readyz")
            assert body["ready"] is False and {"redis", "broker"} <= set(body["down"]), body
            assert answer_of(port, "/livez")[0] == 200
        # The worker's consumer waits for its broker: live, and saying it is connecting.
        wait_until(lambda: answer_of(worker_port, "/livez")[1].get("connecting"), 30,
                   "the worker to say it is connecting")
        not_ready = parley_health("--port", str(worker_port), "--ready")
        live = parley_health("--port", str(coordinator_port))
        assert not_ready.returncode == 1 and not_ready.stderr.startswith("not ready: "), not_ready
        assert "redis" in not_ready.stderr and len(not_ready.stderr.splitlines()) == 1
        assert live.returncode == 0 and live.stdout.startswith("live: "), live

        server.start()
        for port in (coordinator_port, worker_port):
            wait_until(lambda port=port: status_of(port, "/readyz") == 200, 60,
                       f"the process on {port} to be ready again")
        assert not answer_of(worker_port, "/livez")[1].get("connecting")  # consuming again
        group.stop_all()
        lines = every_line_is_json(group)
    assert any("Cannot connect" in line["event"] for line in lines)  # Celery's own, as JSON


def test_a_health_port_asked_for_and_taken_stops_either_process_with_a_failure(processes):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        worker = processes.worker("--health-port", port)
        coordinator = processes.coordinator("--health-port", port)

        assert (worker.wait(60), coordinator.wait(60)) == (2, 2)
    for process in (worker, coordinator):
        said = processes.logs[process.pid].read_text().splitlines()
        # One line each, naming the setting to change, and no traceback.
        assert [line for line in said if line.startswith("parley: ")] == [
            f"parley: cannot serve health checks on 127.0.0.1:{port}: Address already in use; "
            "choose another port with --health-port or PARLEY_HEALTH_PORT (0: no health "
            "server)"]
        assert not [line for line in said if "Traceback" in line]
