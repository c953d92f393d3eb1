"""A room's events stream: what happened in the room, in order, for followers
(``Client.wait``, ``parley events``, dashboards).

Each event is one entry of the room's events stream (``Keys.events``) with flat fields:
``type``, the event's own fields (an absent value is an absent field) and ``ts`` (unix
seconds, six decimals, Redis's clock). An event is written by the same Lua script as the
state change it describes, after every check, so it is in the stream exactly when that
change is in the state: a coordinator that lost its lease writes none (its scripts are
fenced), and nothing writes one for a room that is gone. The stream is capped near
``events_stream_maxlen``. It is one of the room's keys (``Keys.room_keys``): deleting,
archiving or expiring a room removes it. An archive leaves the events out (they tell how
the room got where it is, not what it is), so an imported room's stream starts empty.

======================  ==================================  ===================================
type                    written by                          fields
======================  ==================================  ===================================
``lease_taken``         acquire.lua                         coordinator, epoch
``run_started``         drain.lua, before the run's first   run
                        message; floor_op.lua (an
                        operator's floor change)
``message_committed``   drain.lua (posts), commit.lua       seq, sender, run; turn (agents'
                        (the turn's winner)                 messages); inbox_id (posts)
``turn_opened``         open_turn.lua                       turn, run, phase, deadline
``answer_arrived``      write_answers.lua (the worker), with   turn, agent, kind, phase, score,
                        the answer                          status, error_kind (failed calls),
                                                            latency_ms
``message_chunk``       write_chunk.lua (the worker, while      turn, run, phase, agent, index
                        a call whose answer is posted       (0, 1, 2 .. per call), text
                        streams; only while its turn is
                        open)
``turn_decided``        commit.lua                          turn, run; winner, score and
                                                            stop_reason when there are some
``run_ended``           commit.lua (the turn stopped the    run, status, stop_reason,
                        run), end_run.lua (max_messages     stop_detail; answer when the run
                        by posts, budget),                  has one
                        count_failed_take.lua
                        (room_error), cancel.lua
                        (cancelled)
``room_paused``         pause.lua                           run, status (the run's: a paused
                                                            run is still running), turn_open
                                                            (1: a turn is still to commit)
``room_resumed``        resume.lua                          run, status, waiting (posts in the
                                                            inbox, moved once it goes on)
``queue_changed``       commit.lua (after the turn's        run, queue, listening, asked,
                        message), end_run.lua (before       waiting, over: a mention room's
                        run_ended), when the floor:*        speak queue after the change
                        fields they set change it (the      (JSON lists, flags 1/0)
                        mention record's ``watched``)
``tool_called``         tool_journal.lua (the worker, as a  id, agent, tool, arguments (JSON,
                        tool call starts: claimed in the    cut to 200 characters), turn,
                        tool journal)                       phase (read back as ``call_id``:
                                                            an event's ``id`` is its entry's)
``tool_result``         tool_journal.lua (the worker, as    id, agent, tool, status,
                        the call's result replaces its      duration_ms, result (its first 200
                        start)                              characters)
``tool_approval_         request_approval.lua (the worker,   approval_id (the tool call's id),
requested``             as a tool call waits for a person;  agent, tool, arguments (JSON),
                        once per id)                        turn, phase, expires_at
``tool_approval_         answer_approval.lua (a person's     approval_id, agent, tool, status
answered``              answer, or the wait timing out)     (approved, denied, timed_out),
                                                            approved (1/0), by, reason
``task_started``        task_start.lua (a host, a person,   task_id, agent, worker, hand_back,
                        or the agent's work_in_background   by
                        tool)
``task_progress``       task_beat.lua (the task's worker)   task_id, agent, text
``task_finished``       task_finish.lua (the worker, the    task_id, agent, worker, status
                        coordinator's sweep of lapsed       (done, failed, cancelled,
                        heartbeats, a cancel)               timed_out), error
======================  ==================================  ===================================

In one room the stream's order is the order of the changes: a run's ``run_started`` comes
before its first ``message_committed``, every ``message_committed`` comes in seq order, and a
run's ``run_ended`` after its last message. ``answer_arrived`` events come from the workers
and interleave with the coordinator's as they arrive. A tool call's ``tool_called`` comes
before its ``tool_result``, both before the ``answer_arrived`` of the call that made them
(and after its ``tool_approval_answered`` when it waited for a person: a call is claimed
once approved);
a call asked again replays its recorded tool calls and writes no event for them. A room that failed with
``room_error`` while idle ends again the run it last had: that ``run_ended`` carries the
last run's number. A cancelled run's open turn has a ``turn_opened`` and no
``turn_decided`` (the turn is abandoned; answers may still arrive for it). Between
``room_paused`` and ``room_resumed`` no turn opens and no post is committed, but a turn open
at the pause is still decided.

``message_chunk`` events carry the text of a message as the model writes it: every call
whose answer is posted (an intent-mode winner's ``reply``, a selector room's ``speak``, a
``panel`` or ``moderate`` turn, a ``discuss`` turn) streams, its chunks coalesced (the
first at once, then at most one every 100 ms: workers/streaming.py) so that one message
costs the capped stream a few dozen entries, not one per token. A call's chunks, by
``index`` from 0, concatenate to the reply it answers with; ``index`` 0 starts a call's
text over (the same call made again after a takeover, or an ACP agent's turn asked once
more after its process died midway: workers.acp.turns). They come before that call's
``answer_arrived``, and the committed message is the whole reply (as the policy posts it:
cut where it starts speaking for another participant). A follower knows the chunks of
(turn, phase, agent) were abandoned, nothing of them to be posted, when that call's
``answer_arrived`` has a status other than ``ok`` (the call failed midway: the policy's
failure rule applies, e.g. an intent room asks the next bidder) or when the turn's
``turn_decided`` names another winner or none. A full-mode bid is not streamed: its
message arrives whole in its respond call.

Adding an event type:

1. a member of ``EventType`` and a model below with its fields (its docstring says who
   writes it), listed in ``EVENT_MODELS``; a row in the table above;
2. one XADD in the script (or pipeline) that makes the change it describes, after every
   check. The events key reaches a script through KEYS and the cap through ARGV or its
   payload, as the others' do (``RoomIO.events_maxlen`` on the coordinator, the store's
   ``events_maxlen`` on the workers and clients), and the script refuses a cap that is not
   a count before it writes anything; the shared pieces (``-- @include checks`` and
   ``-- @include events``, shared/lua/lib/) do both and stamp the event's ts::

       if not count(ARGV[5]) then
         return redis.error_reply(BAD_EVENTS_CAP)
       end
       ...
       add_event(KEYS[4], ARGV[5], {'type', 'room_paused', 'run', run})

3. a test of where it falls among the others (tests/support/events.py checks the order of
   every room the tests run).

Readers keep the fields of a type or a field they do not know (``Event`` allows extras), so
followers built before a new type still read the stream.

Over HTTP, ``parley api`` serves a room's stream as server-sent events
(``GET /rooms/{room}/events``, resumable by stream id) and every room's ``run_started`` and
``run_ended`` (``GET /events``). There is no global stream for the latter: a room's scripts
write its own keys only, so that each runs in one Redis Cluster slot. The API follows the
events streams of the rooms that are due or held (``runnable``) or were active lately
(``rooms``) instead, in one ``XREAD BLOCK`` over them all (parley/api/streams.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    ErrorKind,
    RoomStatus,
    StopReason,
    ToolCallRecord,
    ToolCallStatus,
)
from parley.shared.records import decode, decode_fields


class EventType(StrEnum):
    """What an event tells."""

    LEASE_TAKEN = "lease_taken"  # a coordinator took the room's lease under a new epoch
    RUN_STARTED = "run_started"  # a post started a new run
    MESSAGE_COMMITTED = "message_committed"  # a message is in the log (not its content)
    TURN_OPENED = "turn_opened"  # the coordinator opened a turn and is making its calls
    ANSWER_ARRIVED = "answer_arrived"  # a worker wrote a call's answer
    TURN_DECIDED = "turn_decided"  # a turn was committed: who spoke, or why the run stops
    RUN_ENDED = "run_ended"  # the run is over: how it ended and its answer
    ROOM_PAUSED = "room_paused"  # the room was paused: no turn opens, posts wait
    ROOM_RESUMED = "room_resumed"  # the room was resumed where it was
    QUEUE_CHANGED = "queue_changed"  # a mention room's speak queue changed
    MESSAGE_CHUNK = "message_chunk"  # a piece of a message a call is writing
    TOOL_CALLED = "tool_called"  # a call's model asked for a tool call, which starts
    TOOL_RESULT = "tool_result"  # a tool call ended: its status and result
    TOOL_APPROVAL_REQUESTED = "tool_approval_requested"  # a tool call waits for a person
    TOOL_APPROVAL_ANSWERED = "tool_approval_answered"  # approved, denied, or timed out
    TASK_STARTED = "task_started"  # a background task was started for an agent
    TASK_PROGRESS = "task_progress"  # a task's worker told how it goes
    TASK_FINISHED = "task_finished"  # a task ended: done, failed, cancelled, timed_out


class Event(BaseModel):
    """One entry of the events stream: its stream id, type and time. Fields this version
    does not know (a newer writer's) are kept as extras."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = ""
    type: str
    ts: float = 0.0


class LeaseTaken(Event):
    """acquire.lua: ``coordinator`` took the lease under ``epoch``."""

    coordinator: str
    epoch: int


class RunStarted(Event):
    """drain.lua (a post) or floor_op.lua (an operator's floor change): run ``run``
    started."""

    run: int


class MessageCommitted(Event):
    """drain.lua (a post, with its ``inbox_id``) or commit.lua (the winner of ``turn``):
    message ``seq`` is in the log."""

    seq: int
    sender: str
    run: int
    turn: int | None = None
    inbox_id: str | None = None


class TurnOpened(Event):
    """open_turn.lua: turn ``turn`` of run ``run`` is open, its calls due by ``deadline``."""

    turn: int
    run: int
    phase: int = 0
    deadline: float | None = None


class AnswerArrived(Event):
    """The worker: a call of ``turn`` answered (or failed), written with the answer."""

    turn: int
    agent: str
    kind: CallKind = CallKind.BID
    phase: int = 0
    score: float = 0.0
    status: AnswerStatus = AnswerStatus.OK
    error_kind: ErrorKind = ErrorKind.NONE
    latency_ms: float = 0.0


class TurnDecided(Event):
    """commit.lua: turn ``turn`` is committed; ``winner`` spoke (with ``score``) or nobody
    did, and ``stop_reason`` is set when the turn ends the run."""

    turn: int
    run: int
    winner: str | None = None
    score: float | None = None
    stop_reason: StopReason | None = None


class RunEnded(Event):
    """commit.lua, end_run.lua, count_failed_take.lua or cancel.lua: run ``run`` is over."""

    run: int
    status: RoomStatus
    stop_reason: StopReason | None = None
    stop_detail: str | None = None
    answer: str | None = None


class RoomPaused(Event):
    """pause.lua: the room is paused, its run ``run`` keeping its ``status``; with
    ``turn_open`` a turn already open is still to be decided."""

    run: int
    status: RoomStatus
    turn_open: bool = False


class RoomResumed(Event):
    """resume.lua: the room goes on where it was, ``waiting`` posts in its inbox."""

    run: int
    status: RoomStatus
    waiting: int = 0


class QueueChanged(Event):
    """commit.lua or end_run.lua, in run ``run``: a mention room's speak queue as the
    change left it (``floor:queue``, ``listening``, ``asked``, ``waiting``, ``over``)."""

    run: int
    queue: list[str] = Field(default_factory=list)
    listening: list[str] = Field(default_factory=list)
    asked: list[tuple[str, str]] = Field(default_factory=list)  # (agent, person)
    waiting: bool = False
    over: bool = False

    @field_validator("queue", "listening", "asked", mode="before")
    @classmethod
    def _from_json(cls, value: Any) -> Any:
        return orjson.loads(value) if isinstance(value, str | bytes) else value


class MessageChunk(Event):
    """write_chunk.lua (the worker): the ``index``-th piece of the message ``agent`` writes
    for phase ``phase`` of turn ``turn`` (run ``run``), while the turn is open."""

    turn: int
    run: int
    phase: int = 0
    agent: str
    index: int
    text: str = ""


class ToolCalled(Event):
    """tool_journal.lua (the worker): tool call ``call_id`` of ``agent``'s call in phase
    ``phase`` of turn ``turn`` starts, ``tool`` with ``arguments`` (JSON, cut)."""

    call_id: str
    agent: str
    tool: str
    arguments: str = ""
    turn: int
    phase: int = 0


class ToolResult(Event):
    """tool_journal.lua (the worker): tool call ``call_id`` ended with ``status`` after
    ``duration_ms``; ``result`` is the start of what the model read."""

    call_id: str
    agent: str
    tool: str
    status: ToolCallStatus
    duration_ms: float = 0.0
    result: str = ""
class ToolApprovalRequested(Event):
    """request_approval.lua (the worker): tool call ``approval_id`` of ``agent`` (phase ``phase`` of
    turn ``turn``) waits for an approver until ``expires_at``."""

    approval_id: str
    agent: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    turn: int
    phase: int = 0
    expires_at: float = 0.0

    @field_validator("arguments", mode="before")
    @classmethod
    def _from_json(cls, value: Any) -> Any:
        return orjson.loads(value) if isinstance(value, str | bytes) else value


class ToolApprovalAnswered(Event):
    """answer_approval.lua: approval ``approval_id`` was answered ``status`` by ``by`` (with
    ``reason``), or timed out."""

    approval_id: str
    agent: str = ""
    tool: str = ""
    status: str
    approved: bool = False
    by: str = ""
    reason: str = ""


class TaskStarted(Event):
    """task_start.lua: task ``task_id`` was started for ``agent``, worked by ``worker``."""

    task_id: str
    agent: str
    worker: str = ""
    hand_back: str = ""
    by: str = ""


class TaskProgress(Event):
    """task_beat.lua (the worker): how task ``task_id`` goes, in its own words."""

    task_id: str
    agent: str = ""
    text: str = ""


class TaskFinished(Event):
    """task_finish.lua (the worker; the coordinator's sweep; a cancel): task ``task_id``
    ended ``status`` (done, failed, cancelled, timed_out)."""

    task_id: str
    agent: str = ""
    worker: str = ""
    status: str
    error: str = ""


_KNOWN_TYPES = frozenset(EventType)
EVENT_MODELS: dict[EventType, type[Event]] = {
    EventType.LEASE_TAKEN: LeaseTaken,
    EventType.RUN_STARTED: RunStarted,
    EventType.MESSAGE_COMMITTED: MessageCommitted,
    EventType.TURN_OPENED: TurnOpened,
    EventType.ANSWER_ARRIVED: AnswerArrived,
    EventType.TURN_DECIDED: TurnDecided,
    EventType.RUN_ENDED: RunEnded,
    EventType.ROOM_PAUSED: RoomPaused,
    EventType.ROOM_RESUMED: RoomResumed,
    EventType.QUEUE_CHANGED: QueueChanged,
    EventType.MESSAGE_CHUNK: MessageChunk,
    EventType.TOOL_CALLED: ToolCalled,
    EventType.TOOL_RESULT: ToolResult,
    EventType.TOOL_APPROVAL_REQUESTED: ToolApprovalRequested,
    EventType.TOOL_APPROVAL_ANSWERED: ToolApprovalAnswered,
    EventType.TASK_STARTED: TaskStarted,
    EventType.TASK_PROGRESS: TaskProgress,
    EventType.TASK_FINISHED: TaskFinished,
}


def event_type_named(name: str) -> EventType:
    """The event type called ``name``; ValueError, listing the types, for any other name."""
    try:
        return EventType(name)
    except ValueError:
        raise ValueError(f"{name!r} is not an event type (one of: "
                         f"{', '.join(EventType)})") from None


def event_from_entry(entry_id: bytes | str, fields: dict[Any, Any]) -> Event:
    """An events-stream entry as its typed event (a plain ``Event`` for a type this version
    does not know). An empty field reads as an absent one."""
    data: dict[str, Any] = {name: value for name, value in decode_fields(fields).items()
                            if value != ""}
    if "id" in data:
        # An event's own ``id`` field (a tool call's) reads as call_id: ``id`` is the entry's.
        data["call_id"] = data.pop("id")
    data["id"] = decode(entry_id)
    kind = data.get("type", "")
    model = EVENT_MODELS.get(EventType(kind), Event) if kind in _KNOWN_TYPES else Event
    return model.model_validate(data)


def answer_event_fields(bid: Answer) -> dict[str, str]:
    """The ``answer_arrived`` fields of a worker's answer but ``type`` and ``ts``, which
    write_answers.lua adds as it writes the event beside the answer."""
    fields = {"turn": str(bid.turn), "agent": bid.agent, "kind": bid.kind.value,
              "phase": str(bid.phase), "score": repr(bid.score), "status": bid.status.value}
    if bid.error_kind is not ErrorKind.NONE:
        fields["error_kind"] = bid.error_kind.value
    fields["latency_ms"] = repr(bid.latency_ms)
    return fields


# What a tool event carries of a call's arguments and result.
TOOL_EVENT_CHARS = 200


def tool_called_fields(record: ToolCallRecord, turn: int, phase: int) -> dict[str, str]:
    """The ``tool_called`` event of a tool call as it starts, ``ts`` aside."""
    arguments = orjson.dumps(record.arguments).decode()
    return {"type": EventType.TOOL_CALLED.value, "id": record.id, "agent": record.agent,
            "tool": record.tool, "arguments": arguments[:TOOL_EVENT_CHARS],
            "turn": str(turn), "phase": str(phase)}


def tool_result_fields(record: ToolCallRecord) -> dict[str, str]:
    """The ``tool_result`` event of a tool call that ended, ``ts`` aside."""
    return {"type": EventType.TOOL_RESULT.value, "id": record.id, "agent": record.agent,
            "tool": record.tool, "status": record.status.value,
            "duration_ms": repr(record.duration_ms), "result": record.result[:TOOL_EVENT_CHARS]}
