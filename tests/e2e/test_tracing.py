"""One run's trace, whole, across real processes: an API, a coordinator and a worker
export over OTLP/HTTP to a receiver the test runs on loopback; the post, the run, its
turns and the worker's calls share one trace id, the worker's spans under the
coordinator's turn, and the turn records name that trace."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from parley.processes import free_port
from tests.support.api import api_answers
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


def by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.span_id: span for span in spans}


def test_one_runs_trace_spans_the_api_the_coordinator_and_the_worker(processes, queue,
                                                                     receiver):
    # Spans leave each process within 100 ms of ending, not at its exit.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
           "PARLEY_TRACE_URL": "https://tempo.example/trace/{trace_id}"}
    processes.worker("-Q", queue, "-c", "4", env=env)
    processes.coordinator(env=env)
    port = free_port()
    processes.api("--port", str(port), env=env)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: api_answers(url), 30, "the API to answer")
    http = httpx.Client(base_url=url, timeout=30)
    spec = scripted_spec(rotating_scripts(2, 4), queue=queue, max_messages=3)
    room = http.post("/rooms", json=spec.model_dump(mode="json")).json()["room"]
    assert http.post(f"/rooms/{room}/messages",
                     json={"sender": "Ann", "content": "go"}).status_code == 202

    def run_ended() -> bool:
        return http.get(f"/rooms/{room}").json()["status"] == "idle"

    wait_until(run_ended, 30, "the run to end")

    def whole() -> bool:
        names = [span.name for span in receiver.received()]
        return names.count("turn") == 2 and names.count("invoke_agent agent0") == 2 \
            and "invoke_workflow" in names and "post" in names
    wait_until(whole, 30, "every process's spans to arrive")

    spans = receiver.received()
    post = next(span for span in spans if span.name == "post")
    trace = [span for span in spans if span.trace_id == post.trace_id]
    assert {span.service for span in trace} == {"parley-api", "parley-coordinator",
                                                "parley-worker"}
    ids = by_id(trace)
    workflow = next(span for span in trace if span.name == "invoke_workflow")
    assert workflow.parent_id == post.span_id and workflow.service == "parley-coordinator"
    assert workflow.attributes["parley.room"] == room
    turns = [span for span in trace if span.name == "turn"]
    assert len(turns) == 2 and all(turn.parent_id == workflow.span_id for turn in turns)
    agents = [span for span in trace if span.name.startswith("invoke_agent ")]
    assert len(agents) == 4 and {span.service for span in agents} == {"parley-worker"}
    for agent in agents:
        publish = ids[agent.parent_id]
        assert publish.name == "publish parley.call"
        assert ids[publish.parent_id].name == "turn"
    writes = [span for span in trace if span.name == "write_answers"]
    assert writes and all(ids[span.parent_id].name == "publish parley.call" for span in writes)

    turns_doc = http.get(f"/dashboard/rooms/{room}/turns").json()["turns"]
    assert {turn["trace_id"] for turn in turns_doc} == {post.trace_id}
    assert turns_doc[0]["trace_url"] == f"https://tempo.example/trace/{post.trace_id}"
