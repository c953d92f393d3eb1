"""The Python front door: create rooms, post into them, run tasks, follow conversations."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from parley.client import following, speak_queue
from parley.client.results import RoomDetails, RunResult, RunTimeout, StreamReport
from parley.coordinator.policies.what_if import Replay, replay_run
from parley.shared import tracing
from parley.shared.approvals import Approval
from parley.shared.archive import ArchiveResult, archive_room, import_room
from parley.shared.connections import cluster_client, redis_kwargs
from parley.shared.events import Event, MessageChunk, RunEnded
from parley.shared.keys import Keys
from parley.shared.models import DEFAULT_ORGANIZATION, SEED_SENDER, Message, RoomSpec, TurnRecord
from parley.shared.organizations import check_organization
from parley.shared.records import RoomState
from parley.shared.settings import Settings, get_settings, redact_url
from parley.shared.store import CancelResult, RoomStore, RoomSummary
from parley.shared.tasks import Task, TaskBook, TaskNotFound
from parley.shared.tool_catalog import (
    CatalogEntry,
    check_offered,
    check_profiles,
    live_workers,
    offered_profiles,
    read_catalog,
    read_offers,
)
from parley.swarms.history import HISTORY_OUTPUT_TYPES, format_history
from parley.views.transcript import transcript_text

# A hung Redis is an error after seconds, not a hang. Every client command is quick except
# XREAD BLOCK, which waits up to FOLLOW_BLOCK_MS: the read timeout must outlast it. A URL
# may set its own (?socket_timeout=30&socket_connect_timeout=10); the URL's values win.
REDIS_CONNECT_TIMEOUT_S = 5.0
REDIS_READ_TIMEOUT_S = 5.0
FOLLOW_BLOCK_MS = 1000


def new_room_id(spec: RoomSpec) -> str:
    """A readable, unique room id: the spec's name and a random suffix."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.name.lower())[:40]
    return f"{slug.strip('-') or 'room'}-{uuid.uuid4().hex[:8]}"


class Client:
    """A connection to one parley deployment (its Redis and key prefix)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        timeouts: dict[str, Any] = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
                                    "socket_timeout": REDIS_READ_TIMEOUT_S}
        self.redis = (cluster_client(self.settings, **timeouts) if self.settings.redis_cluster
                      else redis.Redis.from_url(self.settings.redis_url, **timeouts,
                                                **redis_kwargs(self.settings)))
        self.store = RoomStore(self.redis, Keys(self.settings.key_prefix),
                               self.settings.message_max_bytes,
                               self.settings.events_stream_maxlen, self.settings.max_agents)
        self._task_book: tuple[RoomStore, TaskBook] | None = None

    @property
    def task_book(self) -> TaskBook:
        """The background tasks, on the client's store (whichever Redis it was given)."""
        if self._task_book is None or self._task_book[0] is not self.store:
            self._task_book = (self.store, TaskBook(self.store.redis, self.store.keys,
                                                    self.settings.events_stream_maxlen,
                                                    self.settings.task_finished_max))
        return self._task_book[1]

    def ping(self) -> None:
        """Raise redis.ConnectionError (TLS failures included) or redis.TimeoutError when
        Redis does not answer within the client's timeouts."""
        self.redis.ping()

    def create_room(self, spec: RoomSpec, room: str | None = None,
                    organization: str = DEFAULT_ORGANIZATION) -> str:
        """Store a new room of ``organization``; returns its id. A spec naming a tool that
        no live worker offers (or one needing approval, without approvers) is refused:
        ToolsRefused; an organization at its max_live_rooms: RoomLimitReached."""
        room = room or new_room_id(spec)
        check_organization(organization)
        if any(agent.tools for agent in spec.callers):
            check_offered(spec, self.tool_catalog())
        if any(agent.is_acp for agent in spec.callers):
            check_profiles(spec, self.acp_profiles())
        self.store.create_room(room, spec, organization)
        return room

    def tool_catalog(self) -> dict[str, CatalogEntry]:
        """Every tool a live worker offers, by name: what it does, how it runs, and which
        workers offer it."""
        return read_catalog(self.redis, self.store.keys)

    def acp_profiles(self) -> dict[str, list[str]]:
        """Every ACP profile a live worker runs, with the workers that run it."""
        return offered_profiles(read_offers(self.redis, self.store.keys))

    def tool_workers(self) -> list[str]:
        """The live workers in the tool catalog, those offering no tool included."""
        return live_workers(self.redis, self.store.keys)

    def post(self, room: str, content: str, sender: str = SEED_SENDER) -> str:
        """Post a message as ``sender``; the room's coordinator commits it and, if the room
        was idle, starts a run (continuing this post's trace). Returns the inbox entry id."""
        with tracing.span("post", {"parley.room": room} if tracing.on() else None,
                          kind="producer"):
            return self.store.post(room, sender, content)

    def listen(self, room: str, agent: str) -> str:
        """A mention room's agent only listens from its next turn on (it keeps its place
        in the queue); returns the change's id."""
        return speak_queue.change(self.store, room, "listen", agent)

    def talk(self, room: str, agent: str) -> str:
        """A listening agent of a mention room talks again."""
        return speak_queue.change(self.store, room, "talk", agent)

    def instruct(self, room: str, agent: str, text: str) -> str:
        """Queue ``agent`` at the front of a mention room for a turn on ``text``."""
        return speak_queue.change(self.store, room, "instruct", agent, text)

    def regenerate(self, room: str) -> str:
        """Queue, at the front, each agent that answered the last person's message."""
        return speak_queue.change(self.store, room, "regenerate")

    def start_task(self, room: str, agent: str, instruction: str,
                   hand_back: str | None = None, by: str = SEED_SENDER) -> Task:
        """Start a background task for ``agent`` (seed 003's tasks): its worker works it off
        the floor while the room goes on, and the result comes back as the agent's
        ``hand_back`` says (or as given). TaskRefused names what is wrong."""
        _, spec = self.store.read_spec(room)
        return self.task_book.start(room, spec, agent, instruction, hand_back, by)

    def tasks(self, room: str) -> list[Task]:
        """The room's background tasks, oldest first."""
        self.store.read_state(room)  # no such room: RoomNotFound
        return self.task_book.list(room)

    def cancel_task(self, task_id: str, room: str | None = None) -> Task:
        """Cancel a task by its id or its first digits (six are enough), in ``room`` or in
        any room; the agent says it was cancelled. TaskNotFound when no task matches."""
        if room is not None:
            return self.task_book.cancel(room, task_id)
        for candidate in self.store.list_rooms(limit=100_000):
            if any(task.id.startswith(task_id.lower()) for task in self.task_book.list(candidate)):
                return self.task_book.cancel(candidate, task_id)
        raise TaskNotFound(f"no task {task_id!r} in any room")

    def speak_queue(self, room: str) -> dict[str, Any]:
        """A mention room's speak queue: speaking, queue, listening, asked, waiting, over."""
        return speak_queue.speak_queue(self.store, room)

    def state(self, room: str) -> RoomState:
        """The room's current state."""
        return self.store.read_state(room)

    def messages(self, room: str, after_seq: int = 0) -> list[Message]:
        """The room's conversation after ``after_seq``."""
        return self.store.read_messages(room, after_seq)

    def turns(self, room: str) -> list[TurnRecord]:
        """The room's turn records."""
        return self.store.read_turns(room)

    def replay(self, room: str, changes: dict[str, Any], run: int | None = None) -> Replay:
        """The room's run (its newest by default) decided again from its turn records
        under other policy settings, up to the first turn that would go otherwise."""
        _, spec = self.store.read_spec(room)
        return replay_run(room, spec, self.store.read_turns(room), changes, run)

    def follow(self, room: str, after_seq: int = 0) -> Iterator[Message]:
        """Yield the room's messages after ``after_seq``, then each as it is committed,
        forever."""
        for item in self.timeline(room, after_seq):
            if isinstance(item, Message):
                yield item

    def timeline(self, room: str, after_seq: int = 0, chunks: bool = False
                 ) -> Iterator[Message | RunEnded | MessageChunk]:
        """Yield the room's messages after ``after_seq``, then each message and each run's
        end as they are committed, forever; a run's end comes after its last message. With
        ``chunks``, each message's chunks too as it is written, before the message."""
        return following.timeline(self.store, room, after_seq, block_ms=FOLLOW_BLOCK_MS,
                                  chunks=chunks)

    def events(self, room: str, after: str = "0-0", follow: bool = True) -> Iterator[Event]:
        """Yield the room's events after the stream id ``after`` (from the oldest kept by
        default), then, with ``follow``, each as it is written, forever."""
        self.store.read_state(room)  # no such room: RoomNotFound, not an endless wait
        if follow:
            return following.follow_events(self.store, room, after, block_ms=FOLLOW_BLOCK_MS)
        return iter(self.store.read_events(room, after))

    def wait(self, room: str, inbox_id: str, timeout_s: float | None = None,
             start_timeout_s: float = 15.0, on_message=None,  # noqa: ANN001
             on_chunk=None) -> RunResult:  # noqa: ANN001
        """Wait until the post ``inbox_id`` is in the log and the run it joined has ended.

        ``on_message`` is called with each message of the room as it is committed, each
        once and in seq order, and with every message before this returns. ``on_chunk`` is
        called with each ``MessageChunk`` (shared.events) of a message being written, as it
        comes and before that message's ``on_message``; the committed message is the truth
        (chunks of a call that then failed are abandoned: see shared/events.py). The wait blocks
        on the room's log and events: the run's end is seen as it is committed, whatever
        ended it (a turn, a budget, a cancel: status idle, stop_reason cancelled). A run
        cancelled while the post still waited in the inbox is not the post's: the post
        starts the next run. A room that failed on its errors (room_error) while the post
        was waiting ends the wait as that run's failure; a failure from before the post
        does not. Raises RunTimeout when no coordinator picks the post up within
        ``start_timeout_s`` (saying so when the room is paused) or the run is not over
        within ``timeout_s``.
        """
        started = time.monotonic()
        waiter = following.RunWaiter(self.store, room, inbox_id, on_message, on_chunk)
        while waiter.ended is None:
            waiter.step(self._block_ms(started, timeout_s,
                                       None if waiter.picked_up else start_timeout_s))
            if waiter.ended is None:
                self._check_time(waiter, time.monotonic() - started, timeout_s, start_timeout_s)
        end, messages = waiter.ended, waiter.finish()
        return RunResult(room=room, status=end.status, stop_reason=end.stop_reason,
                         stop_detail=end.stop_detail, answer=end.answer, messages=messages)

    def rooms(self, limit: int = 100, organization: str | None = None) -> list[RoomSummary]:
        """The most recently active rooms (of ``organization`` only, when given), most
        recent first."""
        return self.store.summaries(limit, self.settings.room_idle_expiry_s, organization)

    def show(self, room: str) -> RoomDetails:
        """One room: its summary, agents, run, usage and streams."""
        summary = self.store.summary(room, self.settings.room_idle_expiry_s)
        state = self.store.read_state(room)
        lengths = self.store.stream_lengths(room)
        return RoomDetails(
            **summary.model_dump(), agents=self.store.agent_names(room), turn=state.turn,
            turn_open=state.turn_open, run_turns=state.run_turns, stop_detail=state.stop_detail,
            answer=state.answer, paused_at=state.paused_at or None,
            posts_waiting=lengths["inbox"],
            prompt_tokens=int(float(state.raw.get("prompt_tokens") or 0)),
            completion_tokens=int(float(state.raw.get("completion_tokens") or 0)),
            failed_takes=state.failed_takes, last_error=state.last_error,
            streams=self.stream_report(room, lengths))

    def stream_report(self, room: str, lengths: dict[str, int] | None = None
                      ) -> dict[str, StreamReport]:
        """Each of the room's streams beside its cap (this process's settings, which should
        match the coordinators' and workers')."""
        settings = self.settings
        caps = {"log": settings.log_stream_maxlen or None, "inbox": None,
                "bids": settings.bids_stream_maxlen, "turns": settings.turns_stream_maxlen,
                "dead_letters": settings.dead_letter_stream_maxlen,
                "events": settings.events_stream_maxlen}
        lengths = lengths or self.store.stream_lengths(room)
        first = self.store.read_messages_from(room, count=1)
        report = {name: StreamReport(length=lengths[name], max_length=cap)
                  for name, cap in caps.items()}
        report["log"].first_seq = first[0].seq if first else None
        return report

    def approvals(self, room: str) -> list[Approval]:
        """The room's tool calls waiting for an approver, oldest first."""
        self.store.read_state(room)  # no such room: RoomNotFound, not an empty list
        return self.store.approvals.pending(room)

    def answered_approvals(self, room: str, last: int = 100) -> list[Approval]:
        """The room's ``last`` answered (or timed out) approvals, newest first."""
        self.store.read_state(room)
        return self.store.approvals.answered(room, last)

    def approve(self, room: str, approval_id: str, approve: bool = True, by: str = SEED_SENDER,
                reason: str = "") -> Approval:
        """Approve (or deny) a pending tool call as the approver ``by``; ``approval_id`` may
        be a unique prefix of a pending one's id. Returns the approval as answered."""
        self.store.read_state(room)
        found = self.store.approvals.find(room, approval_id)
        return self.store.approvals.answer(room, found.id, approve, by, reason)

    def pause(self, room: str) -> bool:
        """Pause the room: no new turn opens (a turn in flight finishes) and posts wait in
        its inbox. False when it was paused already."""
        return self.store.pause(room)

    def resume(self, room: str) -> bool:
        """Resume a paused room where it was: its run goes on, posts that waited included.
        False when it was not paused."""
        return self.store.resume(room)

    def cancel(self, room: str, detail: str = "cancelled by request") -> CancelResult:
        """End the room's current run now (stop_reason cancelled): a turn in flight is
        abandoned, nothing of it written, and its coordinator stops."""
        return self.store.cancel(room, detail)

    def delete(self, room: str, force: bool = False) -> int:
        """Remove the room from Redis; returns how many keys went. Refused while a
        coordinator holds it unless ``force`` (which fences the coordinator out first)."""
        return self.store.delete(room, force=force)

    def archive(self, room: str, path: str | Path, keep: bool = False) -> ArchiveResult:
        """Write the room to ``path`` as JSON lines (spec, state, log, turn records, posts
        waiting, dead letters), then remove it from Redis unless ``keep``."""
        return archive_room(self.store, room, path, keep)

    def import_room(self, path: str | Path, room: str | None = None,
                    organization: str | None = None) -> str:
        """Bring an archived room back (as ``room``, or under its own id); returns its id.
        With ``organization``, only an archive of that organization's room."""
        return import_room(self.store, path, room, organization)

    def transcript(self, room: str, output_type: str = "text") -> Any:
        """The room's conversation: ``text``, the whole of it as ``parley transcript`` shows
        it (control characters escaped, a message's lines after its first marked), or one of
        GroupChat's output types (``str``, ``json``, ``list``, ``dict``, ``final`` ...),
        exactly as GroupChat returns them (``str`` keeps swarms' cut to its context)."""
        if output_type != "text" and output_type not in HISTORY_OUTPUT_TYPES:
            raise ValueError(f"output type {output_type!r} is not one of text, "
                             f"{', '.join(HISTORY_OUTPUT_TYPES)}")
        self.store.read_state(room)
        messages = self.messages(room)
        if output_type == "text":
            return transcript_text(messages)
        return format_history(messages, output_type)

    def run(self, spec: RoomSpec, task: str, timeout_s: float | None = None,
            on_message=None, sender: str = SEED_SENDER,  # noqa: ANN001
            on_chunk=None) -> RunResult:  # noqa: ANN001
        """Run ``task`` in a new room (as swarms gives each task a fresh conversation),
        posted as ``sender``."""
        room = self.create_room(spec)
        inbox_id = self.post(room, task, sender)
        return self.wait(room, inbox_id, timeout_s, on_message=on_message, on_chunk=on_chunk)

    def _block_ms(self, started: float, *timeouts: float | None) -> int:
        """How long the next blocking read may wait: a second at most, and no later than
        the nearest of ``timeouts`` (seconds from ``started``) that is set."""
        block_s = FOLLOW_BLOCK_MS / 1000
        for timeout in timeouts:
            if timeout is not None:
                block_s = min(block_s, started + timeout - time.monotonic())
        return max(1, int(block_s * 1000) + 1)

    def _check_time(self, waiter: following.RunWaiter, waited: float, timeout_s: float | None,
                    start_timeout_s: float) -> None:
        """Raise RunTimeout once the post waited past ``start_timeout_s`` without being
        picked up, or the run past ``timeout_s``."""
        if not waiter.picked_up and waited > start_timeout_s:
            state = waiter.read_state()  # the events cannot tell of a post set aside unread
            if not waiter.picked_up:
                raise RunTimeout(self._not_started_hint(waiter.room, start_timeout_s, state))
        if waiter.ended is None and timeout_s is not None and waited > timeout_s:
            raise RunTimeout(f"room {waiter.room} did not finish within {timeout_s:g}s")

    def _not_started_hint(self, room: str, waited_s: float, state: RoomState) -> str:
        if state.paused:
            return (f"room {room} is paused: its posts wait until `parley rooms resume "
                    f"{room}`")
        if state.failed_takes:
            # A post resets the count: these failures came after it.
            return (f"room {room} did not start within {waited_s:g}s: {state.failed_takes} "
                    f"take(s) failed, last with {state.last_error}")
        alive = [cid for cid, age in self.store.coordinators()
                 if age < 3 * self.settings.lease_ttl_s]
        return (
            f"no coordinator took room {room} within {waited_s:g}s "
            f"({len(alive)} live coordinator(s) on {redact_url(self.settings.redis_url)}); "
            "start one with `parley coordinator`"
        )
