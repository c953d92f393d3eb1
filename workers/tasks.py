"""The ``parley.call`` task: answer a chunk of a room's calls of one kind, against one snapshot."""

from __future__ import annotations

import contextvars
import hashlib
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from functools import cache, partial
from threading import Lock

import redis
import structlog
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from parley.shared import metrics
from parley.shared.connections import cluster_client, redis_kwargs
from parley.shared.keys import Keys
from parley.shared.models import (
    AgentSpec,
    Answer,
    CallRequest,
    Message,
    RoomSpec,
    ToolCallRecord,
)
from parley.shared.protocol import CALL_TASK, TOOL_TASK, ToolRequest
from parley.shared.store import RoomStore
from parley.shared.tasks import NOTES_TASKS, SHORT_ID, TaskBook, TaskRefused, notes_line, on_it
from parley.workers.app import app, settings
from parley.workers.calls import answer_call, call_in, uses_tools
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
    # Every task thread may write answers at once: past redis-py's default cap of 100
    # connections a plain pool fails the write, a blocking one makes the thread wait.
    # A dropped connection (a Redis restart) or a full Redis is retried: an answer written
    # again after its reply was lost is known by its answer_id, neither kept nor counted
    # twice. Retries come at most worker_reconnect_max_s apart and go on through a long
    # outage: an answer that cost a model call is worth keeping (and counting), and the
    # coordinator gives a turn that overlapped an outage its time again.
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=settings.worker_reconnect_max_s)
    retry = Retry(backoff, retries=REDIS_RETRIES, supported_errors=RETRIED_ERRORS)
    if settings.redis_cluster:
        return cluster_client(settings, max_connections=2 * settings.worker_concurrency + 8,
                              retry=retry)
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=2 * settings.worker_concurrency + 8,
        retry=retry, **redis_kwargs(settings))
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
_transcripts = TranscriptCache()


@app.task(name=CALL_TASK)
def answer_calls(request: dict) -> None:
    """Answer each call of the chunk concurrently; write each answer as soon as it exists."""
    req = CallRequest.model_validate(request)
    if time.time() > req.deadline:
        log.info("bid_request_expired", room=req.room, turn=req.turn)
        return
    with structlog.contextvars.bound_contextvars(room=req.room, turn=req.turn,
                                                 attempt=req.attempt):
        answer_chunk(req)


def answer_chunk(req: CallRequest) -> None:
    """Run the chunk's calls side by side, each in this task's log context."""
    store = store_for(req.prefix)
    spec = _specs.get(store, req.prefix, req.room, req.spec_version)
    transcript = _transcript_once(store, req)
    notes = task_notes(store, req)
    callers = {name: with_task_notes(caller(spec, req, name), notes) for name in req.agents}
    offers = {name: with_background_tools(CALL_PROMPTS[req.kind].policy_tools(spec, agent),
                                          spec.agent(name))
              for name, agent in callers.items()}
    pending = {
        _calls.submit(contextvars.copy_context().run,
                      partial(answer_call, settings=settings, policy_tools=offers[name],
                              tools=tool_run(store, spec, req, agent, transcript,
                                             offers[name])),
                      agent, spec.agents, call_in(req, name), transcript, req.deadline,
                      chunk_writer(store, spec, req, name))
        for name, agent in callers.items()
    }
    while pending:
        # Bids that finish together go out in one round trip and wake the coordinator once.
        done, pending = wait(pending, timeout=max(0.0, req.deadline - time.time()),
                             return_when=FIRST_COMPLETED)
        if not done:
            break
        write_answers(store, req, [future.result() for future in done], callers)
    if pending:
        # Past the deadline the task ends, so that its Celery slot serves other rooms; the
        # calls still out end soon (each stops at the deadline too) and write their answers
        # then: an answer that cost tokens counts, late or not.
        log.info("calls_past_deadline", calls=len(pending))
        for future in pending:
            future.add_done_callback(
                lambda done: write_answers(store, req, [done.result()], callers))


def write_answers(store: RoomStore, req: CallRequest, answers: list[Answer],
                  callers: dict[str, AgentSpec]) -> None:
    """Write answers of the request's calls in one round trip, and count them; an answer
    that called work_in_background starts its task first."""
    answers = [started_work(store, req, answer) for answer in answers]
    store.write_answers(req.room, answers, settings.bids_stream_maxlen)
    for answer in answers:
        metrics.observe_answer(answer, callers[answer.agent].model)


def task_notes(store: RoomStore, req: CallRequest) -> str:
    """What a posted turn's notes say of the room's tasks (none for other calls), so that an
    agent asked how a task goes answers from them."""
    if not CALL_PROMPTS[req.kind].streams:
        return ""
    tasks = TaskBook(store.redis, store.keys, settings.events_stream_maxlen).list(req.room)
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
    book = TaskBook(store.redis, store.keys, settings.events_stream_maxlen)
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
        book = TaskBook(store.redis, store.keys, settings.events_stream_maxlen)
        toolbox = Toolbox([TaskTools(book, req.room), *toolbox.sources])
    return ToolRun(toolbox, journal, partial(await_approval, store, req.room, spec),
                   partial(send_tool_call, req.prefix, req.room), names,
                   settings.tool_result_max_bytes)




def send_tool_call(prefix: str, room: str, tool: ToolDef, record: ToolCallRecord, claim: Claim,
                   timeout_s: float, until: float) -> None:
    """Send a ``queue=`` tool's call to its queue, as its own task (TOOL_TASK)."""
    request = ToolRequest(prefix=prefix, room=room, tool=tool.name,
                          record=record.model_dump(mode="json"), claim=claim.raw,
                          timeout_s=timeout_s, until=until)
    app.send_task(TOOL_TASK, args=[request.model_dump(mode="json")], queue=tool.options.queue,
                  expires=until)


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
    status, text = call_tool(build_toolbox(settings), req.tool, record.arguments, left,
                             settings.tool_result_max_bytes)
    duration_ms = round((time.perf_counter() - started) * 1000, 3)
    journal.finish(ended(record, status, text, duration_ms), text, claim)


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
