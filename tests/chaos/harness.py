"""What the failover tests share: a redis-server of their own, parley processes pointed at
it, scripted rooms with random bids, the transcript a run without failures produces, and
the invariants every room must keep whatever was killed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import fakeredis
import structlog

from parley import processes
from parley.coordinator import policies
from parley.coordinator.lease import Leases
from parley.coordinator.outbox import Outbox
from parley.coordinator.room_io import RoomIO
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.keys import Keys
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    Message,
    RoomSpec,
    RoomStatus,
    StopReason,
    TurnRecord,
)
from parley.shared.protocol import CALL_TASK
from parley.shared.records import answer_from_fields
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from tests.chaos.handoff_rooms import check_handoff_rules, is_handoff_room
from tests.chaos.mention_rooms import check_mention_rules, is_mention_room
from tests.chaos.roundtable_rooms import check_roundtable_rules, is_roundtable_room
from tests.chaos.selector_rooms import check_selector_rules, is_selector_room
from tests.support.events import check_event_order
from tests.support.local_worker import LocalWorkerTransport
from tests.support.observe import log_events
from tests.support.rooms import scripted_spec

T = TypeVar("T")
TASK = "Plan the launch."


class PrivateRedis:
    """A redis-server on a free port that only this test uses, so it may be killed and
    restarted; stopped by its PID when the test ends, also when it fails."""

    def __init__(self, directory: Path, *options: str) -> None:
        self.directory = directory
        self.options = options
        self.port = processes.free_port()
        self.process = None

    @property
    def url(self) -> str:
        """Where parley processes find it."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart) the server on the same port and directory."""
        self.process = processes.start_redis(self.port, self.directory, *self.options)

    def kill(self) -> None:
        """``kill -9``: whatever Redis had not written to its files is lost."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits."""
        if self.process is not None:
            processes.stop(self.process)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def logs_on_failure(group: processes.ProcessGroup, lines: int = 60) -> Iterator[None]:
    """Print the end of every process's log when the block fails."""
    try:
        yield
    except BaseException:
        print(group.log_tail(lines))
        raise


def parley_env(redis_url: str, prefix: str, **settings: object) -> dict[str, str]:
    """Environment for parley processes on ``redis_url``; ``settings`` as PARLEY_* values."""
    env = {
        "PARLEY_REDIS_URL": redis_url,
        "PARLEY_BROKER_URL": redis_url,
        "PARLEY_KEY_PREFIX": prefix,
        "PARLEY_WORKER_PRELOAD_LITELLM": "false",
        "PARLEY_LOG_FORMAT": "json",
        "PARLEY_HEALTH_PORT": "0",  # a test asks for its health server with --health-port
    }
    env.update({f"PARLEY_{name.upper()}": str(value) for name, value in settings.items()})
    return env


def random_scripts(rng: random.Random, agents: int, turns: int, all_keen: bool = False,
                   sleep_s: tuple[float, float] = (0.01, 0.1)) -> dict[str, list[dict[str, Any]]]:
    """Scripts with random bids and sleeps. Each turn one agent (or, with ``all_keen``,
    every agent) is keen (score >= 0.85, with a message), so no run lulls before the
    scripts end; who wins depends on every bid and the recency penalty, so a turn decided
    from the wrong bids shows in the transcript."""
    names = [f"agent{i}" for i in range(agents)]
    scripts: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for turn in range(1, turns + 1):
        keen = rng.choice(names)
        for name in names:
            eager = all_keen or name == keen
            score = rng.uniform(0.85, 1.0) if eager else rng.uniform(0.0, 1.0)
            speaks = eager or rng.random() > 0.2
            scripts[name].append({
                "score": round(score, 3),
                "message": f"{name} on turn {turn}: {rng.randrange(10**6)}" if speaks else "",
                "sleep": round(rng.uniform(*sleep_s), 3),
            })
    return scripts


def random_room(rng: random.Random, queue: str, turns: int, agents: int = 3,
                bid_timeout_s: float = 2.0, all_keen: bool = False) -> RoomSpec:
    """A scripted room that runs ``turns`` turns and then ends on a lull."""
    return scripted_spec(random_scripts(rng, agents, turns, all_keen), queue=queue,
                         bid_timeout_s=bid_timeout_s, max_messages=turns + 10)


def without_sleeps(spec: RoomSpec) -> RoomSpec:
    """The same room with instant agents (sleeps change timing, never content)."""
    data = spec.model_dump(mode="json")
    callers = [*data["agents"], *([data["policy"]["selector"]] if "selector" in data["policy"]
                                  else [])]
    for agent in callers:
        for entry in agent["script"]:
            entry["sleep"] = 0
    return RoomSpec.model_validate(data)


@dataclass(frozen=True)
class Reference:
    """What a run with no failures produces: its transcript and why it stopped."""

    messages: list[tuple[str, str]]
    stop_reason: StopReason | None


def reference_store(spec: RoomSpec, task: str = TASK, room: str = "room") -> RoomStore:
    """A store (on a fakeredis of its own) holding ``room`` after its run with no failures:
    the same turn loop, in process, with every agent (and a selector room's selector)
    answering at once."""
    server = fakeredis.FakeServer()
    keys = Keys("expected")
    store = RoomStore(fakeredis.FakeRedis(server=server), keys)
    store.create_room(room, without_sleeps(spec))
    store.post(room, "User", task)

    async def serve() -> None:
        client = fakeredis.FakeAsyncRedis(server=server)
        scripts = Scripts(client)
        lease = await Leases(client, keys, scripts, "reference", 60).acquire(room)
        transport = LocalWorkerTransport(store.redis, keys)
        await RoomRunner(lease, RoomIO(client, keys, scripts), Outbox(transport),
                         TurnOptions("expected", 8, 100_000)).run()

    with structlog.testing.capture_logs():
        asyncio.run(serve())
    return store


def reference_run(spec: RoomSpec, task: str = TASK) -> Reference:
    """What the run with no failures produces (see reference_store)."""
    store = reference_store(spec, task)
    return Reference([(m.sender, m.content) for m in store.read_messages("room")],
                     store.read_state("room").stop_reason)


def expected_messages(spec: RoomSpec, task: str = TASK) -> list[tuple[str, str]]:
    """The transcript of a run with no failures (see reference_run)."""
    return reference_run(spec, task).messages


def log_lines(group: processes.ProcessGroup, text: str) -> list[str]:
    """The lines of the group's process logs that contain ``text``."""
    return [line for path in group.logs.values()
            for line in path.read_text(errors="replace").splitlines() if text in line]


def turns_asked_again(group: processes.ProcessGroup) -> dict[str, set[int]]:
    """Per room, the turns a coordinator asked once more because nobody had answered, or
    because an outage of Redis or the broker overlapped them."""
    asked: dict[str, set[int]] = {}
    events = log_events(group, "turn_asked_again") + log_events(group, "turn_given_time_again")
    for event in events:
        asked.setdefault(event["room"], set()).add(event["turn"])
    return asked


def task_runs(group: processes.ProcessGroup) -> Counter[str]:
    """How many times each call task succeeded across the group's workers (their logs at
    INFO)."""
    return Counter(re.findall(rf"{re.escape(CALL_TASK)}\[([0-9a-f-]+)\] succeeded",
                              "\n".join(log_lines(group, "] succeeded"))))


def tasks_run_twice(group: processes.ProcessGroup) -> list[str]:
    """Celery task ids that succeeded more than once: a redelivered task that ran instead
    of being dropped. Fails when no task's success was logged at all, so that a change in
    the task's name or the log's format cannot make this check pass unseen."""
    runs = task_runs(group)
    assert runs, f"no {CALL_TASK} task was logged as succeeded: is the worker at INFO?"
    return [task for task, count in runs.items() if count > 1]


def unique(bids: list[Answer]) -> list[Answer]:
    """The bids without exact copies (the same answer, down to its latency, written twice)."""
    return list({bid.model_dump_json(): bid for bid in bids}.values())


@dataclass
class RoomCheck:
    """What checking one finished room found, for the test's report."""

    turns: int
    takeovers: int
    reused_bids: int
    timed_out: bool
    compared_messages: int
    policy: str = "bid"
    stop_reason: StopReason | None = None
    selector_retries: int = 0  # turns that asked the selector twice


def check_room(store: RoomStore, room: str, spec: RoomSpec, expected: list[tuple[str, str]],
               asked_again: Collection[int] = (), expected_stop: StopReason | None = None
               ) -> RoomCheck:
    """Assert every failover invariant on a finished room and count what it went through.

    Seqs run 1..n; every turn was decided once and no message written twice; each turn's
    recorded answers (every phase's), fed to the policy again, give its recorded winner,
    stop, cuts and posted message; the transcript (and, if ``expected_stop`` is given, the
    stop reason) equals the failure-free run's up to the first turn in which a call timed
    out (all of it when none did); no call ran twice (``asked_again``: the turns a
    coordinator logged as asked once more); a selector or round-table room kept its
    policy's rules, and only a round-table whose moderator failed may end ``failed``; and
    the room's events tell its log in order, whoever held the room.
    """
    state = store.read_state(room)
    status = (RoomStatus.FAILED if state.stop_reason is StopReason.MODERATOR_FAILED
              else RoomStatus.IDLE)
    assert state.status is status and not state.turn_open, (room, state.raw)
    messages = store.read_messages(room)
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1)), room
    records = store.read_turns(room)
    assert [r.turn for r in records] == list(range(1, len(records) + 1)), room
    check_replay(room, spec, messages, records)
    first_timeout = next((r for r in records if any(b.status is AnswerStatus.TIMEOUT
                                                    for b in r.bids)), None)
    compared = len(expected) if first_timeout is None else first_timeout.snapshot_seq
    actual = [(m.sender, m.content) for m in messages]
    assert actual[:compared] == expected[:compared], room
    if first_timeout is None:
        assert actual == expected, room
        assert expected_stop is None or state.stop_reason is expected_stop, (
            room, state.stop_reason, expected_stop)
    check_no_call_twice(store, room, records, asked_again)
    # Answers are not checked against their turn's opening: a Redis restart may lose it.
    check_event_order(store.read_events(room), messages, answers_after_opening=False)
    if is_selector_room(spec):
        check_selector_rules(spec, messages, records, state.stop_reason)
    if is_roundtable_room(spec):
        check_roundtable_rules(spec, messages, records, state.stop_reason)
    if is_mention_room(spec):
        check_mention_rules(spec, messages, records, state.stop_reason)
    if is_handoff_room(spec):
        check_handoff_rules(spec, messages, records, state.stop_reason)
    return RoomCheck(
        turns=len(records), takeovers=state.epoch - 1,
        reused_bids=sum(1 for r in records for b in r.bids if 0 < b.attempt < r.epoch),
        timed_out=first_timeout is not None, compared_messages=compared,
        policy=spec.policy.kind, stop_reason=state.stop_reason,
        selector_retries=sum(1 for r in records
                             if sum(b.kind is CallKind.SELECT for b in r.bids) == 2),
    )


def check_replay(room: str, spec: RoomSpec, messages: list[Message],
                 records: list[TurnRecord]) -> None:
    """Every turn posted at most once, and each turn's recorded answers give its recorded
    decision and posted message again."""
    spoken = {m.turn: m for m in messages if m.turn is not None}
    assert len(spoken) == len(messages) - 1, f"{room}: a turn posted twice"
    for record in records:
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop, decision.cuts) == (
            record.winner, record.stop_reason, record.cuts), (room, record.turn)
        assert decision.next is None, (room, record.turn, "a recorded turn wants more calls")
        assert (spoken[record.turn].sender if record.turn in spoken else None) == record.winner
        if record.turn in spoken:
            assert spoken[record.turn].content == decision.message, (room, record.turn)


def check_no_call_twice(store: RoomStore, room: str, records: list[TurnRecord],
                        asked_again: Collection[int]) -> None:
    """No call request ran twice: each holder makes a call of a turn's phase once, so two
    answers of one (turn, phase, agent, attempt) mean a request ran twice; unless that turn
    was asked again (nobody had answered a phase by its deadline), when an answer that was
    only late comes twice."""
    entries = store.redis.xrange(store.keys.bids(room))
    answers = [answer_from_fields(fields) for _, fields in entries]
    # A write retried on a Redis that hung stores the same answer twice: one request.
    requests = Counter((a.turn, a.phase, a.agent, a.attempt) for a in unique(answers)
                       if a.turn not in asked_again)
    twice = [key for key, count in requests.items() if count > 1]
    turns_twice = {key[0] for key in twice}
    assert twice == [], (f"{room}: a request ran twice", twice, [
        (entry_id, answer) for (entry_id, _), answer in zip(entries, answers, strict=True)
        if answer.turn in turns_twice], [r for r in records if r.turn in turns_twice])
