"""Tracing with the SDK's in-memory exporter: the spans of a run through the turn loop
(names, parents, attributes) for each policy's calls, a model call's GenAI attributes, a
tool call's span, the trace id on turn records and logs; and, off, no SDK at all."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from parley.shared import tracing
from parley.shared.models import AgentSpec, CallKind, RoomSpec
from parley.shared.settings import Settings, get_settings
from parley.shared.store import RoomStore
from parley.workers.calls import Call, answer_call
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")
ROOM = "room-1"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.install(None)


def run_room(sync_redis, async_redis, keys, spec: RoomSpec,
             text: str = "Plan a 3-day Tokyo trip") -> RoomStore:
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    with tracing.span("request"):  # the API request the post came in
        store.post(ROOM, "User", text)
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))
    return store


def by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        named.setdefault(span.name, []).append(span)
    return named


def parent_of(span: ReadableSpan, finished: tuple[ReadableSpan, ...]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    return next(s for s in finished if s.context.span_id == span.parent.span_id)


SCRIPTS = {"A": [{"score": 0.9, "message": "one"}, {"score": 0.9, "message": "two"}],
           "B": [{"score": 0.1, "message": "no"}] * 2}
REPLIES = {"A": [{"content": "one"}], "B": [{"content": "no"}]}
SELECTOR = {"kind": "selector", "call_timeout_s": 5,
            "selector": {"model": "scripted", "script": [{"content": "A"},
                                                         {"content": "TERMINATE"}]}}
ROUNDTABLE = {"kind": "roundtable", "moderator": "B", "rounds": 1, "call_timeout_s": 5}
VERDICT = {"A": [{"content": "one"}], "B": [{"content": "Verdict: one"}]}
MENTION = {"kind": "mention", "everyone": ["A", "B"], "call_timeout_s": 5}
HANDOFF = {"kind": "handoff", "start": "A", "call_timeout_s": 5}


@pytest.mark.parametrize(("policy", "scripts", "call_kinds"), [
    ({"max_messages": 3}, SCRIPTS, {"bid"}),
    (SELECTOR, REPLIES, {"select", "speak"}),
    (ROUNDTABLE, VERDICT, {"panel", "moderate"}),
    (MENTION, REPLIES, {"discuss"}),
    (HANDOFF, REPLIES, {"handoff"}),
], ids=["bid", "selector", "roundtable", "mention", "handoff"])
def test_a_run_is_one_trace_from_the_post_to_each_agents_call(
        spans, sync_redis, async_redis, keys, policy, scripts, call_kinds):
    spec = scripted_spec(scripts)
    spec = RoomSpec.model_validate({**spec.model_dump(exclude_none=True), "policy": policy})
    store = run_room(sync_redis, async_redis, keys, spec, "@A Plan a 3-day Tokyo trip")

    finished = spans.get_finished_spans()
    named = by_name(finished)
    assert len({span.context.trace_id for span in finished}) == 1
    workflow, = named["invoke_workflow"]
    assert parent_of(workflow, finished).name == "request"
    assert "takeover" not in named
    assert workflow.attributes["parley.room"] == ROOM
    assert workflow.attributes["parley.policy"] == spec.policy.kind
    turns = named["turn"]
    assert turns and all(parent_of(turn, finished) is workflow for turn in turns)
    if spec.policy.kind != "mention":  # a discussion's run ends with its queue, not a turn
        assert turns[-1].attributes["parley.stop_reason"]
    assert any(turn.attributes.get("parley.winner") == "A" for turn in turns)
    for publish in named["publish parley.call"]:
        assert parent_of(publish, finished).name == "turn"
    agents = [s for s in finished if s.name.startswith("invoke_agent ")]
    assert {s.attributes["parley.call.kind"] for s in agents} == call_kinds
    for agent in agents:
        assert parent_of(agent, finished).name == "publish parley.call"
        assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert all(parent_of(commit, finished).name == "turn" for commit in named["commit"])
    trace_id = format(workflow.context.trace_id, "032x")
    assert [record.trace_id for record in store.read_turns(ROOM)] == [trace_id] * len(turns)
    assert store.read_state(ROOM).trace.split("-")[1] == trace_id


def test_a_new_coordinator_continues_the_runs_trace_with_a_takeover_span(
        spans, sync_redis, async_redis, keys):
    spec = scripted_spec(SCRIPTS)
    spec = RoomSpec.model_validate({**spec.model_dump(exclude_none=True),
                                    "policy": {"max_messages": 3}})
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Go")
    # Only B answers: the turn stays open with A's call out, as a coordinator died there.
    silent = LocalWorkerTransport(sync_redis, keys, answering=set())
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(serve_once(async_redis, keys, silent, owner="c1",
                                                lease_ttl_s=0.3), 0.2))
    trace = store.read_state(ROOM).trace
    time.sleep(0.35)  # the lease's ttl: the next owner may take the room
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys),
                           owner="c2"))

    named = by_name(spans.get_finished_spans())
    takeover, = named["takeover"]
    assert len(named["invoke_workflow"]) == 1  # c1's: c2 continued it
    assert format(takeover.parent.span_id, "016x") == trace.split("-")[2]
    assert format(takeover.context.trace_id, "032x") == trace.split("-")[1]
    assert {record.trace_id for record in store.read_turns(ROOM)} == {trace.split("-")[1]}


def test_a_model_call_is_a_chat_span_with_the_genai_attributes(spans):
    agent = AgentSpec(name="Mock", model="gpt-4o-mini", litellm_kwargs={
        "mock_response": "", "mock_tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "respond", "arguments": '{"score": 0.8, "message": "Go."}'}}]})
    with tracing.span("invoke_agent Mock"):
        # A first litellm call loads tokenizers: the deadline leaves it time.
        answer_call(agent, [agent], Call(1, 0), lambda: [], time.time() + 60,
                    settings=get_settings())

    chat, = by_name(spans.get_finished_spans())["chat gpt-4o-mini"]
    attributes = dict(chat.attributes)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert attributes["gen_ai.response.model"]
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["gen_ai.response.finish_reasons"]
    assert "gen_ai.input.messages" not in attributes  # content is opt-in


def test_message_content_reaches_spans_only_when_asked(spans):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.install(provider, record_content=True)
    agent = AgentSpec(name="Mock", model="gpt-4o-mini", litellm_kwargs={
        "mock_response": "I would rather chat."})
    answer_call(agent, [agent], Call(1, 0), lambda: [], time.time() + 60, settings=get_settings())

    chat, = by_name(spans.get_finished_spans())["chat gpt-4o-mini"]
    assert "gen_ai.input.messages" in chat.attributes
    assert "I would rather chat." in chat.attributes["gen_ai.output.messages"]


def test_a_tool_call_is_an_execute_tool_span_under_the_agents_call(spans):
    from parley.workers.tools.loop import ToolRun
    from parley.workers.tools.python_tools import load_python_tools
    from parley.workers.tools.toolbox import Toolbox

    agent = AgentSpec.model_validate({
        "name": "Ann", "model": "scripted", "tools": ["shout"],
        "script": [{"tool_calls": [{"name": "shout", "arguments": {"text": "hey"}}]},
                   {"content": "Done."}]})
    run = ToolRun(Toolbox([load_python_tools(["tests.support.tool_modules.sample"])]),
                  names=["Ann"], max_result_bytes=300)
    with tracing.span("invoke_agent Ann"):
        answer = answer_call(agent, [agent], Call(turn=1, attempt=0, kind=CallKind.SPEAK,
                                                  number=1),
                             lambda: [], time.time() + 10, settings=Settings(), tools=run)

    assert answer.message == "Done."
    finished = spans.get_finished_spans()
    tool, = by_name(finished)["execute_tool shout"]
    assert parent_of(tool, finished).name == "invoke_agent Ann"
    assert tool.attributes["gen_ai.tool.name"] == "shout"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["parley.tool.status"] == "ok"


def test_logs_carry_the_current_spans_ids(spans):
    with capture_logs(processors=[tracing.add_trace_ids]) as logs, \
            tracing.span("turn") as current:
        import structlog
        structlog.get_logger("parley.turn").info("inside")
    ids = current.get_span_context()
    assert logs[0]["trace_id"] == format(ids.trace_id, "032x")
    assert logs[0]["span_id"] == format(ids.span_id, "016x")


def test_a_traceparent_from_outside_is_used_only_when_well_formed():
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.valid_traceparent(good) == good
    for bad in ("", "junk", "00-" + "0" * 32 + "-b7ad6b7169203331-01", good + "x",
                good.upper()):
        assert tracing.valid_traceparent(bad) == ""
    assert tracing.trace_id_of(good) == "0af7651916cd43dd8448eb211c80319c"


def test_tracing_is_on_with_parley_tracing_or_a_standard_endpoint():
    assert not tracing.wanted(Settings(), {})
    assert tracing.wanted(Settings(tracing="otlp"), {})
    assert tracing.wanted(Settings(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"})
    assert tracing.wanted(Settings(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"})


def test_off_the_helpers_make_nothing_and_keep_nothing():
    assert not tracing.on()
    assert tracing.span("turn") is tracing.span("commit")  # one shared no-op
    assert tracing.start("invoke_workflow") is None
    assert tracing.traceparent() == ""
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}


def test_off_a_run_and_a_tool_call_build_no_span_attributes(sync_redis, async_redis, keys,
                                                             monkeypatch):
    from parley.workers.tools.loop import ToolRun
    from parley.workers.tools.python_tools import load_python_tools
    from parley.workers.tools.toolbox import Toolbox

    given: list[object] = []
    off_span = tracing.span

    def span(name, attributes=None, **kwargs):
        given.append(attributes)
        return off_span(name, attributes, **kwargs)
    monkeypatch.setattr(tracing, "span", span)
    monkeypatch.setattr(tracing, "annotate", lambda *args: given.append(args))

    store = run_room(sync_redis, async_redis, keys, scripted_spec(rotating_scripts(2, 2)))
    agent = AgentSpec.model_validate({
        "name": "Ann", "model": "scripted", "tools": ["shout"],
        "script": [{"tool_calls": [{"name": "shout", "arguments": {"text": "hey"}}]},
                   {"content": "Done."}]})
    run = ToolRun(Toolbox([load_python_tools(["tests.support.tool_modules.sample"])]),
                  names=["Ann"], max_result_bytes=300)
    answer = answer_call(agent, [agent], Call(turn=1, attempt=0, kind=CallKind.SPEAK, number=1),
                         lambda: [], time.time() + 10, settings=Settings(), tools=run)

    assert len(store.read_messages(ROOM)) > 1 and answer.message == "Done."
    assert len(given) > 5 and set(map(id, given)) == {id(None)}


def test_off_no_process_imports_the_tracing_sdk():
    # redis-py loads the SDK's metrics when installed; parley's tracing must load nothing.
    code = ("import sys; import parley.workers.tasks, parley.coordinator.turn_loop, "
            "parley.api.app, parley.cli; from parley.shared import tracing; "
            "from parley.shared.settings import Settings; "
            "assert not tracing.setup('worker', Settings(), {}); "
            "print(sorted(m for m in sys.modules if m.startswith("
            "('opentelemetry.sdk.trace', 'opentelemetry.exporter'))))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PARLEY_TRAC"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_the_dashboard_links_a_traced_turn_to_the_trace_url():
    from parley.api.dashboard import with_trace_urls

    trace_id = "0af7651916cd43dd8448eb211c80319c"
    turns = {"turns": [{"turn": 1, "trace_id": trace_id}, {"turn": 2, "trace_id": None},
                       {"turn": 3, "trace_id": "<script>"}], "open_turn": None}
    linked = with_trace_urls(turns, "https://tempo.example/trace/{trace_id}")
    assert [turn["trace_url"] for turn in linked["turns"]] == [
        f"https://tempo.example/trace/{trace_id}", None, None]
    assert with_trace_urls(turns, "")["turns"][0]["trace_url"] is None


def test_off_a_span_costs_about_what_an_empty_with_block_does():
    # A turn makes about a dozen spans: off, each must stay far below a turn's
    # milliseconds (an SDK span costs several microseconds; the no-op, a fraction of one).
    def per_span_s() -> float:
        started = time.perf_counter()
        for _ in range(10_000):
            with tracing.span("turn", {"parley.room": ROOM}):
                pass
        return (time.perf_counter() - started) / 10_000

    assert not tracing.on()
    assert min(per_span_s() for _ in range(5)) < 2e-6


def test_parley_turns_json_carries_each_turns_trace_id(spans, sync_redis, async_redis, keys):
    from parley.client.turn_report import read_turn_report
    from parley.views.documents import turns_json

    spec = scripted_spec(SCRIPTS, max_messages=2)
    store = run_room(sync_redis, async_redis, keys, spec)

    document = turns_json(read_turn_report(store, ROOM, None))
    trace_ids = {turn["trace_id"] for turn in document["turns"]}
    assert trace_ids == {store.read_turns(ROOM)[0].trace_id} and None not in trace_ids


def test_setup_names_the_service_by_process_kind_unless_otel_service_name_does(monkeypatch):
    from opentelemetry import trace

    # The test process's global provider stays unset: other tests' libraries must not export.
    monkeypatch.setattr(trace, "set_tracer_provider", lambda provider: None)
    try:
        assert tracing.setup("worker", Settings(tracing="otlp"), {})
        assert tracing._tracer.resource.attributes["service.name"] == "parley-worker"
        # The SDK reads the process's environment, as in a real process.
        monkeypatch.setenv("OTEL_SERVICE_NAME", "chat-workers")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
        assert tracing.setup("worker", Settings(), os.environ)
        assert tracing._tracer.resource.attributes["service.name"] == "chat-workers"
    finally:
        tracing.install(None)


def test_the_exporter_is_otlp_http_unless_grpc_is_asked_for(monkeypatch):
    import importlib.util

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    http = tracing.exporter({})
    assert isinstance(http, OTLPSpanExporter)
    assert http._endpoint == tracing.DEFAULT_HTTP_ENDPOINT
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")
    assert tracing.exporter(os.environ)._endpoint == "http://c:4318/v1/traces"
    with pytest.raises(RuntimeError, match="http/protobuf or grpc"):
        tracing.exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
        with pytest.raises(RuntimeError, match=r"parley\[grpc\]"):
            tracing.exporter({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})
