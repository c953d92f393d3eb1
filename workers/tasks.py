"""The ``parley.call`` task: answer a message's chunks of calls, each of one room and kind,
against its own snapshot and deadline."""

from __future__ import annotations

import contextvars
import hashlib
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from functools import cache, partial
from threading import Lock
from typing import Any

import redis
import structlog
from pydantic import ValidationError
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from parley.shared import metrics, tracing
from parley.shared.connections import cluster_client, redis_kwargs
from parley.shared.keys import Keys
from parley.shared.logs import one_line
from parley.shared.models import (
    AgentSpec,
    Answer,
    AnswerStatus,
    CallRequest,
    Message,
    RoomSpec,
    ToolCallRecord,
)
from parley.shared.organizations import add_usage
from parley.shared.protocol import CALL_TASK, TOOL_TASK, ToolRequest
from parley.shared.records import REPLACE_SURROGATES
from parley.shared.settings import Settings
from parley.shared.store import RoomNotFound, RoomStore
from parley.shared.tasks import NOTES_TASKS, SHORT_ID, TaskBook, TaskRefused, notes_line, on_it
from parley.workers.app import acp_sessions, app, settings
from parley.workers.calls import Call, ExternalTurn, answer_call, call_in, uses_tools
from parley.workers.prompts import (
    CALL_PROMPTS,
    NO_POLICY_TOOLS,
    WORK_IN_BACKGROUND,
    PolicyTools,
    participant_names,
    tasks_notes,
    with_background_tools,
    with_task_notes,
)
from parley.workers.streaming import ChunkWriter
from parley.workers.tools.approvals import await_approval
from parley.workers.tools.base import ToolDef
from parley.workers.tools.journal import Claim, ToolJournal, read_entry
from parley.workers.tools.loop import ToolRun, call_tool, ended
from parley.workers.tools.task_tools import TASK_TOOL_NAMES, TaskTools
from parley.workers.tools.toolbox import Toolbox, build_toolbox

log = structlog.get_logger("parley.worker")

# Agent calls are I/O bound: a chunk's calls run side by side on these threads. A thread
# starts only when no idle one is left, and a task holds its Celery slot until its calls
# end or their deadline passes (every call stops there too, a litellm attempt within its
# timeout's rounding up to a second), so the calls in flight are bounded by about
# concurrency x chunk size (whatever -c the worker was started with). The cap must never
# bind below that, or calls would wait for each other and a turn would take several waves.
CALL_THREADS_MAX = 4096
_calls = ThreadPoolExecutor(max_workers=CALL_THREADS_MAX, thread_name_prefix="agent-call")
# Attempts at a lost Redis before a task gives up (about 25 s at the default interval).
REDIS_RETRIES = 30
# What a task's writes try again: a lost connection, and a Redis out of memory, which takes
# writes again once memory is freed (a refused script wrote nothing).
RETRIED_ERRORS = (redis.ConnectionError, redis.TimeoutError, socket.timeout,
                  redis.OutOfMemoryError)


@cache
def _redis() -> redis.Redis:
    """The worker process's client: one pool for every task thread."""
    return worker_client(settings)


def worker_client(config: Settings) -> redis.Redis:
    """The workers' Redis client."""
    # Every task thread may write answers at once: past redis-py's default cap of 100
    # connections a plain pool fails the write, a blocking one makes the thread wait.
    # A dropped connection (a Redis restart) or a full Redis is retried: an answer written
    # again after its reply was lost is known by its answer_id, neither kept nor counted
    # twice. Retries come at most worker_reconnect_max_s apart and go on through a long
    # outage: an answer that cost a model call is worth keeping (and counting), and the
    # coordinator gives a turn that overlapped an outage its time again. What models and
    # tools wrote is written whatever it holds (REPLACE_SURROGATES).
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=config.worker_reconnect_max_s)
    retry = Retry(backoff, retries=REDIS_RETRIES, supported_errors=RETRIED_ERRORS)
    if config.redis_cluster:
        return cluster_client(config, max_connections=2 * config.worker_concurrency + 8,
                              retry=retry, encoding_errors=REPLACE_SURROGATES)
    pool = redis.BlockingConnectionPool.from_url(
        config.redis_url, max_connections=2 * config.worker_concurrency + 8,
        retry=retry, encoding_errors=REPLACE_SURROGATES, **redis_kwargs(config))
    return redis.Redis(connection_pool=pool)


@cache
def store_for(prefix: str) -> RoomStore:
    """The room store under the request's key prefix (one per prefix: it registers the
    scripts once)."""
    return RoomStore(_redis(), Keys(prefix), settings.message_max_bytes,
                     settings.events_stream_maxlen)


class SpecCache:
    """Room specs by (prefix, room), kept while their version is current."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.specs: OrderedDict[tuple[str, str], tuple[int, RoomSpec]] = OrderedDict()
        self.lock = Lock()
        # One lock per room being read: a big room's chunks arrive together, and each
        # reading (and validating) the same spec would cost the worker chunks x agents.
        self.reading: dict[tuple[str, str], Lock] = {}

    def get(self, store: RoomStore, prefix: str, room: str, version: int) -> RoomSpec:
        """The spec at ``version``, read from Redis only when not cached; calls that want
        the same room meanwhile wait for that one read."""
        key = (prefix, room)
        spec = self.cached(key, version)
        if spec is not None:
            return spec
        with self.lock:
            reading = self.reading.setdefault(key, Lock())
        with reading:
            spec = self.cached(key, version)
            if spec is not None:
                return spec
            read_version, spec = store.read_spec(room)
            with self.lock:
                self.specs[key] = (read_version, spec)
                if len(self.specs) > self.size:
                    self.specs.popitem(last=False)
                self.reading.pop(key, None)
        return spec

    def cached(self, key: tuple[str, str], version: int) -> RoomSpec | None:
        """The cached spec of ``key`` if it is at ``version``."""
        with self.lock:
            cached = self.specs.get(key)
            if cached and cached[0] == version:
                self.specs.move_to_end(key)
                return cached[1]
        return None


class TranscriptCache:
    """Each room's log as far as this worker has read it, so that a task reads only the
    messages committed since its room's last task here, not the whole conversation.

    A log only grows and a seq never changes once written; a room deleted and created
    again under the same id is noticed by its last known message no longer matching. A
    log capped by ``log_stream_maxlen`` loses its oldest messages: with ``keep`` set, the
    cache and every transcript it gives hold the last ``keep`` messages up to the snapshot
    (Redis keeps at least that many), so a warm worker and a cold one build the same prompt.
    """

    def __init__(self, rooms: int = 256) -> None:
        self.rooms = rooms
        self.logs: OrderedDict[tuple[str, str], list[Message]] = OrderedDict()
        self.lock = Lock()

    def upto(self, store: RoomStore, prefix: str, room: str, seq: int, keep: int = 0
             ) -> list[Message]:
        """The room's messages with seq up to ``seq`` (only the last ``keep``, if set)."""
        key = (prefix, room)
        with self.lock:
            known = self.logs.get(key, [])
        if known and known[-1].seq >= seq:
            # Seqs are contiguous from the first one cached (a capped log drops the oldest).
            earlier = last(known[: max(0, seq - known[0].seq + 1)], keep)
            if not keep or len(earlier) == keep or known[0].seq == 1:
                return earlier
            # An earlier snapshot than the cache keeps enough of: Redis still has them.
            return store.read_messages(room, after_seq=max(0, seq - keep), upto_seq=seq)
        # Read again from the last known message, to check that it is still there.
        after = known[-1].seq - 1 if known else 0
        fresh = store.read_messages(room, after_seq=after, upto_seq=seq)
        if known and fresh[:1] == known[-1:]:
            messages = last(known + fresh[1:], keep)
        else:
            messages = last(fresh if not known else store.read_messages(room, upto_seq=seq), keep)
        with self.lock:
            self.logs[key] = messages
            self.logs.move_to_end(key)
            if len(self.logs) > self.rooms:
                self.logs.popitem(last=False)
        return messages


def last(messages: list[Message], keep: int) -> list[Message]:
    """The last ``keep`` messages (all when ``keep`` is 0)."""
    return messages[-keep:] if keep else messages


_specs = SpecCache()
# Who holds an ACP call's claim (taken_already): this process, for the operator to find.
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
_transcripts = TranscriptCache()


@app.task(name=CALL_TASK)
def answer_calls(request: dict | None = None, requests: list[dict] | None = None) -> None:
    """Answer the message's calls, of one room or of several (``requests``; ``request``
    is one room's, from coordinators before shared messages), each against its own room,
    snapshot and deadline: a call past its deadline is dropped, every answer is written to
    its own room as soon as it exists."""
    raws = requests if requests is not None else [request or {}]
    await_chunks([chunk for chunk in map(start_chunk, raws) if chunk is not None])


class Chunk:
    """One request's calls on their way: its store, callers and the futures still out."""

    def __init__(self, req: CallRequest, store: RoomStore, callers: dict[str, AgentSpec],
                 pending: set[Future[Answer]]) -> None:
        self.req, self.store, self.callers, self.pending = req, store, callers, pending

    def write(self, done: set[Future[Answer]]) -> None:
        """Write the answers of the done calls that are this chunk's, in one round trip."""
        mine = done & self.pending
        self.pending -= mine
        if mine:
            write_answers(self.store, self.req, [future.result() for future in mine],
                          self.callers)

    def leave(self) -> None:
        """Past the deadline: the calls still out write their answers when they end (they
        stop at the deadline too); an answer that cost tokens counts, late or not."""
        if self.pending:
            log.info("calls_past_deadline", room=self.req.room, turn=self.req.turn,
                     calls=len(self.pending))
        for future in self.pending:
            future.add_done_callback(
                lambda done: write_answers(self.store, self.req, [done.result()], self.callers))
        self.pending = set()


def start_chunk(raw: dict) -> Chunk | None:
    """Start the request's calls side by side, each in its room's log context; None for
    a request past its deadline (its calls are dropped), unreadable, or whose room is gone
    (one room's trouble is not the others' of the same message)."""
    try:
        req = CallRequest.model_validate(raw)
    except ValidationError as error:
        log.warning("call_request_unreadable", error=one_line(str(error), 300))
        return None
    if time.time() > req.deadline:
        log.info("bid_request_expired", room=req.room, turn=req.turn)
        return None
    with structlog.contextvars.bound_contextvars(room=req.room, turn=req.turn,
                                                 attempt=req.attempt), \
            tracing.continued(req.traceparent):
        try:
            return submit_calls(req)
        except RoomNotFound:
            log.warning("call_room_gone")
            return None


def submit_calls(req: CallRequest) -> Chunk:
    """Submit each call of the request to the call threads."""
    store = store_for(req.prefix)
    spec = _specs.get(store, req.prefix, req.room, req.spec_version)
    transcript = _transcript_once(store, req)
    notes = task_notes(store, req)
    answered = answered_before(store, req)
    callers = {name: with_task_notes(caller(spec, req, name), notes) for name in req.agents
               if name not in answered and not taken_already(store, req, spec.agent(name))}
    offers = {name: with_background_tools(CALL_PROMPTS[req.kind].policy_tools(spec, agent),
                                          spec.agent(name))
              for name, agent in callers.items()}
    pending = {
        _calls.submit(contextvars.copy_context().run,
                      partial(traced_call, req, settings=settings, policy_tools=offers[name],
                              tools=tool_run(store, spec, req, agent, transcript,
                                             offers[name]),
                              external=external_turn(store, spec, req, agent)),
                      agent, spec.agents, call_in(req, name), transcript, req.deadline,
                      chunk_writer(store, spec, req, name))
        for name, agent in callers.items()
    }
    return Chunk(req, store, callers, pending)


def await_chunks(chunks: list[Chunk]) -> None:
    """Write answers as they come until every chunk is answered or past its deadline;
    then the task ends, so that its Celery slot serves other rooms."""
    while chunks:
        for chunk in [c for c in chunks if time.time() >= c.req.deadline]:
            chunk.leave()
        chunks = [chunk for chunk in chunks if chunk.pending]
        if not chunks:
            return
        # Bids that finish together go out in one round trip and wake the coordinator once.
        first_deadline = min(chunk.req.deadline for chunk in chunks)
        done, _ = wait(set().union(*(chunk.pending for chunk in chunks)),
                       timeout=max(0.0, first_deadline - time.time()),
                       return_when=FIRST_COMPLETED)
        for chunk in chunks:
            chunk.write(done)


def traced_call(req: CallRequest, agent: AgentSpec, *args: Any, **kwargs: Any) -> Answer:
    """answer_call in the call's ``invoke_agent <name>`` span."""
    # Attributes only while tracing: off, every call would build them for nothing.
    attributes = None
    if tracing.on():
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent.name,
                      "gen_ai.conversation.id": req.room, "parley.call.kind": req.kind.value,
                      "parley.turn": req.turn, "parley.phase": req.phase}
    with tracing.span(f"invoke_agent {agent.name}", attributes) as current:
        answer = answer_call(agent, *args, **kwargs)
        if current is not None:
            tracing.annotate(current, {"parley.answer.status": answer.status.value,
                                       "parley.answer.error_kind": answer.error_kind.value,
                                       "gen_ai.usage.input_tokens": answer.prompt_tokens,
                                       "gen_ai.usage.output_tokens": answer.completion_tokens})
        return answer


def write_answers(store: RoomStore, req: CallRequest, answers: list[Answer],
                  callers: dict[str, AgentSpec]) -> None:
    """Write answers of the request's calls in one round trip, and count them (in the
    organization's day too: after the script, as the organization's totals are another
    Redis Cluster slot than the room's; an answer written before, a retry's, not again);
    an answer that called work_in_background starts its task first."""
    answers = [started_work(store, req, answer) for answer in answers]
    # Under the request's own trace: the answers of a shared message are written from the
    # task's thread, outside any one call's span.
    attributes = None
    if tracing.on():
        attributes = {"parley.room": req.room, "parley.turn": req.turn,
                      "parley.answers": len(answers)}
    try:
        with tracing.span("write_answers", attributes, parent=req.traceparent):
            written = store.write_answers(req.room, answers, settings.bids_stream_maxlen)
    finally:
        # A failed ACP turn's session waits for its answer, written or not: the turn asked
        # again starts after it (workers.acp.sessions, AcpSession.unanswered).
        for answer in answers:
            if callers[answer.agent].is_acp:
                acp_sessions().answered((req.prefix, req.room, answer.agent))
    if written == len(answers):
        add_usage(store.redis, store.keys, req.organization, answers)
    for answer in answers:
        metrics.observe_answer(answer, callers[answer.agent].model, req.organization)


def task_notes(store: RoomStore, req: CallRequest) -> str:
    """What a posted turn's notes say of the room's tasks (none for other calls), so that an
    agent asked how a task goes answers from them. A room that never had a task costs no
    read."""
    if not CALL_PROMPTS[req.kind].streams or req.tasks_started == 0:
        return ""
    tasks = task_book(store).list(req.room)
    return tasks_notes([notes_line(task) for task in reversed(tasks[-NOTES_TASKS:])])


def started_work(store: RoomStore, req: CallRequest, answer: Answer) -> Answer:
    """Start the task an answer's work_in_background call asks for (once: its id is the
    call's, so a call asked again starts none); the answer says it is on it."""
    call = answer.policy_call
    if call is None or call.name != WORK_IN_BACKGROUND:
        return answer
    what = str(call.arguments.get("what") or "").strip()
    if not what:
        return answer.model_copy(update={"policy_call": None})
    _, spec = store.read_spec(req.room)
    task_id = hashlib.sha256(f"{req.room}|{req.turn}|{req.phase}|{answer.agent}|{answer.call}"
                             .encode()).hexdigest()[:16]
    book = task_book(store)
    try:
        book.start(req.room, spec, answer.agent, what, by=answer.agent, task_id=task_id)
    except (TaskRefused, redis.ResponseError) as error:
        log.warning("task_refused", agent=answer.agent, error=str(error))
        return answer
    # Recorded as the turn's tool call, so `parley turns` and `parley run` tell of it.
    record = ToolCallRecord(id=f"{req.room}.{req.turn}.{req.phase}.{answer.call}.task",
                            agent=answer.agent, tool=WORK_IN_BACKGROUND,
                            arguments={"what": what}, result=f"task {task_id[:SHORT_ID]} started")
    return answer.model_copy(update={"policy_call": None,
                                     "message": answer.message or on_it(what),
                                     "tool_calls": [*(answer.tool_calls or []), record]})


def task_book(store: RoomStore) -> TaskBook:
    """The background tasks on ``store``, as this worker's settings keep them."""
    return TaskBook(store.redis, store.keys, settings.events_stream_maxlen,
                    settings.task_finished_max)


def tool_run(store: RoomStore, spec: RoomSpec, req: CallRequest, agent: AgentSpec,
             transcript: Callable[[], list[Message]],
             policy_tools: PolicyTools = NO_POLICY_TOOLS) -> ToolRun | None:
    """What the agent's tool loop runs with on this worker, for a call that runs one."""
    if not uses_tools(agent, req.kind, policy_tools):
        return None
    journal = ToolJournal(store, req.room, settings.tool_journal_maxlen, req.turn, req.phase)
    names = participant_names(spec.agent_names, transcript())
    toolbox = build_toolbox(settings)
    if any(name in TASK_TOOL_NAMES for name in agent.tools):
        book = task_book(store)
        toolbox = Toolbox([TaskTools(book, req.room), *toolbox.sources])
    return ToolRun(toolbox, journal, partial(await_approval, store, req.room, spec),
                   partial(send_tool_call, req.prefix, req.room, req.organization), names,
                   settings.tool_result_max_bytes, req.organization)




def answered_before(store: RoomStore, req: CallRequest) -> set[str]:
    """The request's agents whose call of this phase has an answer already: a turn taken
    over is asked again for every call not answered at the take, while the dead
    coordinator's calls may still be queued ahead and answer first. The coordinator keeps
    each call's first answer, so another would be paid for and dropped. (A timeout does
    not count: an answer may still replace it.)"""
    if not req.answers_from:
        return set()
    answered = {answer.agent for _, answer in store.read_answers(req.room, req.answers_from)
                if answer.turn == req.turn and answer.phase == req.phase
                and answer.status is not AnswerStatus.TIMEOUT}
    skipped = answered.intersection(req.agents)
    if skipped:
        log.info("calls_answered_already", agents=sorted(skipped))
    return skipped


def taken_already(store: RoomStore, req: CallRequest, agent: AgentSpec) -> bool:
    """True when a worker runs the ACP agent's call already: a turn of a coding agent may
    outlast the broker's visibility timeout, and the copy delivered again, here or on
    another worker, is not asked twice and writes no answer."""
    if not agent.is_acp:
        return False
    call = f"{req.turn}.{req.phase}.{req.attempt}"
    if store.claim_acp_turn(req.room, agent.name, call, WORKER_ID, req.deadline):
        return False
    log.warning("acp_call_already_in_turn", agent=agent.name)
    return True


def external_turn(store: RoomStore, spec: RoomSpec, req: CallRequest, agent: AgentSpec
                  ) -> ExternalTurn | None:
    """How an ACP agent's call runs here: a turn of its session (None for other agents)."""
    if not agent.is_acp:
        return None

    # Put off: the protocol's package takes a third of a worker's imports, and only a worker
    # running an ACP agent needs it.
    from parley.workers.acp.turns import AcpTurn, run_turn_once_more

    def run(call: Call, transcript: Callable[[], list[Message]], deadline: float,
            stream: ChunkWriter | None) -> tuple[str, list[ToolCallRecord]]:
        turn = AcpTurn(agent.name, f"{call.turn}.{call.phase}.{call.number or call.turn}",
                       deadline, stream, partial(await_approval, store, req.room, spec),
                       call.kind)
        return run_turn_once_more(acp_sessions(), store, req.prefix, req.room, spec, agent,
                                  turn, transcript(), call.instruction,
                                  settings.acp_history_messages)

    return run


def send_tool_call(prefix: str, room: str, organization: str, tool: ToolDef,
                   record: ToolCallRecord, claim: Claim, timeout_s: float, until: float
                   ) -> None:
    """Send a ``queue=`` tool's call to its queue, as its own task (TOOL_TASK)."""
    request = ToolRequest(prefix=prefix, room=room, organization=organization, tool=tool.name,
                          record=record.model_dump(mode="json"), claim=claim.raw,
                          timeout_s=timeout_s, until=until)
    headers: dict[str, Any] = {}
    tracing.inject(headers)  # the tool's run continues the calling agent's trace
    app.send_task(TOOL_TASK, args=[request.model_dump(mode="json")], queue=tool.options.queue,
                  expires=until, headers=headers)


@app.task(name=TOOL_TASK)
def run_tool_call(request: dict) -> None:
    """Run one tool call sent to this worker's tool queue; its result goes to the room's
    journal (the calling worker waits for it there). A call past its time is not run."""
    req = ToolRequest.model_validate(request)
    store = store_for(req.prefix)
    journal = ToolJournal(store, req.room, settings.tool_journal_maxlen, 0, 0)
    record = ToolCallRecord.model_validate(req.record)
    claim = read_entry(req.claim)
    left = min(req.timeout_s, req.until - time.time())
    if left <= 0 or not isinstance(claim, Claim):
        log.info("tool_call_expired", room=req.room, tool=req.tool, id=record.id)
        return
    started = time.perf_counter()
    with tracing.continued(getattr(run_tool_call.request, tracing.TRACEPARENT, None)), \
            tracing.span(f"run_tool {req.tool}", {"gen_ai.tool.name": req.tool,
                                                  "gen_ai.tool.call.id": record.id}
                         if tracing.on() else None):
        status, text = call_tool(build_toolbox(settings), req.tool, record.arguments, left,
                                 settings.tool_result_max_bytes)
    duration_ms = round((time.perf_counter() - started) * 1000, 3)
    journal.finish(ended(record, status, text, duration_ms, req.organization), text, claim)


def chunk_writer(store: RoomStore, spec: RoomSpec, req: CallRequest, name: str
                 ) -> ChunkWriter | None:
    """Where a call whose answer is posted writes its text as it comes (the room's events
    stream); None for the other calls. What the call kind holds back (a mention room's
    silent token) is never shown."""
    call = CALL_PROMPTS[req.kind]
    if not call.streams:
        return None

    def sink(index: int, text: str) -> bool:
        return store.write_chunk(req.room, req.turn, req.phase, name, index, text)

    return ChunkWriter(sink, call.held(spec))


def caller(spec: RoomSpec, req: CallRequest, name: str) -> AgentSpec:
    """The agent a call goes to, as its call kind shapes it for the room (a mention room's
    turn takes the room's notes, an intent the room's intent_max_tokens)."""
    return CALL_PROMPTS[req.kind].caller(spec, spec.agent(name), req.instructions.get(name, ""))


def _transcript_once(store: RoomStore, req: CallRequest):  # noqa: ANN202
    """The snapshot's messages, read at most once per task and only if an agent needs it."""
    lock = Lock()
    cached: list[list[Message]] = []

    def transcript() -> list[Message]:
        with lock:
            if not cached:
                cached.append(_transcripts.upto(store, req.prefix, req.room, req.snapshot_seq,
                                                settings.log_stream_maxlen))
            return cached[0]

    return transcript
