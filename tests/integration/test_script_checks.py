"""Every script checks what it reads before its first write: a bad inbox entry is set aside
as a dead letter, a bad payload or argument writes nothing. On fakeredis and the real Redis."""

from __future__ import annotations

import re

import orjson
import pytest
import redis

from parley.shared.keys import Keys
from parley.shared.models import Answer
from parley.shared.records import COUNT_LIMIT, RoomState
from parley.shared.scripts import Scripts, source
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec
from tests.support.script_calls import ROOM

TOKEN = "c1:1"
DEAD_CAP = 100
SENDER_MAX = 128
CONTENT_MAX = 1000
VALUE_MAX = 64
LOG_CAP = 0  # never trimmed
EVENTS_CAP = 1000


@pytest.fixture
def scripts(any_redis: redis.Redis, store: RoomStore, keys: Keys) -> Scripts:
    """The scripts, with c1 holding room r1's lease (epoch 1)."""
    scripts = Scripts(any_redis)
    # A lease that outlives the slowest test on a loaded machine (600 turns): these tests
    # are about what the scripts check, not about leases lapsing.
    assert int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=["c1", 300_000, 1000])) == 1
    return scripts


def drain(scripts: Scripts, keys: Keys, dead_cap: int = DEAD_CAP, batch: int = 100) -> list:
    return scripts.drain(
        keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.log(ROOM),
              keys.dead_letters(ROOM), keys.events(ROOM)],
        args=[TOKEN, 1, batch, dead_cap, SENDER_MAX, CONTENT_MAX, VALUE_MAX, LOG_CAP, EVENTS_CAP])


def set_aside(reply: list) -> list[tuple[str, str]]:
    flat = [value.decode() for value in reply[2]]
    return list(zip(flat[::2], flat[1::2], strict=True))


def raw_post(store: RoomStore, keys: Keys, fields: dict) -> str:
    """An inbox entry written straight into Redis, as another tool might."""
    return store.redis.xadd(keys.inbox(ROOM), fields).decode()


def snapshot(store: RoomStore, keys: Keys) -> tuple:
    """Everything a failed script must leave as it was."""
    r = store.redis
    return (r.hgetall(keys.state(ROOM)), r.xrange(keys.log(ROOM)), r.xrange(keys.inbox(ROOM)),
            r.xrange(keys.turns(ROOM)), r.xlen(keys.dead_letters(ROOM)),
            r.xrange(keys.events(ROOM)))


BAD_ENTRIES = [
    ({"content": "hi", "ts": "1.0"}, "no sender"),
    ({"sender": "  ", "content": "hi", "ts": "1.0"}, "sender is blank"),
    ({"sender": "Ann\nOptimist", "content": "hi", "ts": "1.0"}, "sender has control characters"),
    ({"sender": "A" * (SENDER_MAX + 1), "content": "hi", "ts": "1.0"}, "sender is too long"),
    ({"sender": b"Ann\xff", "content": "hi", "ts": "1.0"}, "sender is not UTF-8"),
    ({"sender": "Ann", "ts": "1.0"}, "no content"),
    ({"sender": "Ann", "content": " \n ", "ts": "1.0"}, "content is blank"),
    ({"sender": "Ann", "content": "x" * (CONTENT_MAX + 1), "ts": "1.0"}, "content is too long"),
    ({"sender": "Ann", "content": b"caf\xc3", "ts": "1.0"}, "content is not UTF-8"),
    ({"sender": "Ann", "content": b"\xed\xa0\x80", "ts": "1.0"}, "content is not UTF-8"),
    ({"sender": "Ann", "content": "hi", "ts": "yesterday"}, "ts is not a unix time"),
    ({"sender": "Ann", "content": "hi", "ts": "nan"}, "ts is not a unix time"),
    ({"sender": "Ann", "content": "hi", "ts": "inf"}, "ts is not a unix time"),
    ({"sender": "Ann", "content": "hi", "ts": "-5"}, "ts is not a unix time"),
    ({"sender": "Ann", "content": "hi", "ts": ""}, "ts is not a unix time"),
]


@pytest.mark.parametrize(("fields", "reason"), BAD_ENTRIES)
def test_an_unreadable_inbox_entry_is_set_aside_and_the_good_ones_go_on(
        store, scripts, keys, fields, reason):
    store.post(ROOM, "User", "before")
    bad_id = raw_post(store, keys, fields)
    store.post(ROOM, "Ann", "after")

    reply = drain(scripts, keys)

    assert int(reply[0]) == 2
    (inbox_id, why), = set_aside(reply)
    assert inbox_id == bad_id and reason in why
    messages = store.read_messages(ROOM)
    assert [(m.seq, m.sender, m.content) for m in messages] == [
        (1, "User", "before"), (2, "Ann", "after")]
    state = store.read_state(ROOM)
    assert (state.last_seq, state.messages_in_run, state.status) == (2, 2, "running")
    assert store.redis.xlen(keys.inbox(ROOM)) == 0
    (_, letter), = store.redis.xrange(keys.dead_letters(ROOM))
    assert letter[b"inbox_id"].decode() == bad_id and reason in letter[b"reason"].decode()
    for name, value in fields.items():
        kept = value if isinstance(value, bytes) else value.encode()
        assert letter[name.encode()] == kept[:VALUE_MAX]


@pytest.mark.parametrize(("sender", "content", "problem"), [
    ("Ann\nOptimist", "hi", "must be 1-64 letters"),
    ("A" * (SENDER_MAX + 1), "hi", "must be 1-64 letters"),
    ("Ann", "x" * 2001, "the message is 2001 bytes; the most is 2000"),
    ("Ann", " \n", "needs some content"),
])
def test_a_post_drain_would_set_aside_is_refused(any_redis, keys, sender, content, problem):
    store = RoomStore(any_redis, keys, message_max_bytes=2000)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    with pytest.raises(ValueError, match=problem):
        store.post(ROOM, sender, content)
    assert any_redis.xlen(keys.inbox(ROOM)) == 0


def test_an_entry_without_ts_is_committed_at_the_time_of_its_inbox_id(store, scripts, keys):
    inbox_id = raw_post(store, keys, {"sender": "Ann", "content": "no ts"})

    assert int(drain(scripts, keys)[0]) == 1

    (message,) = store.read_messages(ROOM)
    assert (message.seq, message.sender, message.content) == (1, "Ann", "no ts")
    assert message.ts == int(inbox_id.split("-")[0]) / 1000


def test_a_ts_is_normalised_to_decimal_seconds(store, scripts, keys):
    raw_post(store, keys, {"sender": "Ann", "content": "hex", "ts": " 0x10 "})
    drain(scripts, keys)
    assert store.redis.xrange(keys.log(ROOM))[0][1][b"ts"] == b"16.000000"


def test_only_unreadable_entries_do_not_start_a_run(store, scripts, keys):
    raw_post(store, keys, {"sender": "Ann"})
    reply = drain(scripts, keys)
    state = store.read_state(ROOM)
    assert (int(reply[0]), len(set_aside(reply)), state.status, state.run) == (0, 1, "idle", 0)
    assert state.inbox_last_id != "0-0" and store.redis.xlen(keys.inbox(ROOM)) == 0


def test_a_dead_letter_keeps_at_most_sixteen_fields_cut_short(store, scripts, keys):
    fields = {f"f{i:02}": "v" * 200 for i in range(20)}
    raw_post(store, keys, {**fields, "sender": "Ann"})
    drain(scripts, keys)
    (_, letter), = store.redis.xrange(keys.dead_letters(ROOM))
    kept = {k: v for k, v in letter.items() if k not in (b"inbox_id", b"reason")}
    assert len(kept) == 16 and all(len(v) == VALUE_MAX for v in kept.values())
    assert b"5 fields dropped" in letter[b"reason"]


def test_the_dead_letter_stream_is_capped(store, scripts, keys):
    pipe = store.redis.pipeline(transaction=False)
    for _ in range(1000):
        pipe.xadd(keys.inbox(ROOM), {"content": "no sender"})
    pipe.execute()
    while store.redis.xlen(keys.inbox(ROOM)):
        drain(scripts, keys, dead_cap=DEAD_CAP, batch=256)
    # Approximate trimming drops whole stream nodes (100 entries by default).
    assert DEAD_CAP <= store.redis.xlen(keys.dead_letters(ROOM)) <= DEAD_CAP + 100


@pytest.mark.parametrize("field", ["last_seq", "run", "messages_in_run"])
def test_drain_into_a_state_with_a_broken_counter_writes_nothing(store, scripts, keys, field):
    store.redis.hset(keys.state(ROOM), field, "many")
    store.post(ROOM, "User", "hi")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match=f"BADSTATE {field}"):
        drain(scripts, keys)
    assert snapshot(store, keys) == before


def test_drain_into_a_log_ahead_of_last_seq_writes_nothing(store, scripts, keys):
    store.redis.xadd(keys.log(ROOM), {"seq": "5", "sender": "X", "content": "y"}, id="5-0")
    store.post(ROOM, "User", "hi")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADSTATE"):
        drain(scripts, keys)
    assert snapshot(store, keys) == before


def test_drain_after_the_logs_top_entry_was_deleted_writes_nothing(store, scripts, keys):
    store.post(ROOM, "User", "one")
    store.post(ROOM, "User", "two")
    drain(scripts, keys)
    store.redis.xdel(keys.log(ROOM), "2-0")
    store.redis.hset(keys.state(ROOM), "last_seq", 1)
    raw_post(store, keys, {"content": "no sender"})
    store.post(ROOM, "User", "three")
    before = snapshot(store, keys)
    # Seq 2 can never be written again: the log's XADD, the script's first write, fails.
    with pytest.raises(redis.ResponseError):
        drain(scripts, keys)
    assert snapshot(store, keys) == before


@pytest.mark.parametrize("args", [
    [TOKEN, 1, "lots", DEAD_CAP, SENDER_MAX, CONTENT_MAX, VALUE_MAX, EVENTS_CAP],
    [TOKEN, 1, 100, "", SENDER_MAX, CONTENT_MAX, VALUE_MAX, EVENTS_CAP],
    [TOKEN, "x", 100, DEAD_CAP, SENDER_MAX, CONTENT_MAX, VALUE_MAX, LOG_CAP, EVENTS_CAP],
    [TOKEN, 1, 100, DEAD_CAP, SENDER_MAX, CONTENT_MAX, VALUE_MAX, LOG_CAP, "all"],
    [TOKEN, 1, 100, DEAD_CAP, SENDER_MAX, CONTENT_MAX, VALUE_MAX, "~100", EVENTS_CAP],
    [TOKEN, 1, 100, DEAD_CAP, SENDER_MAX, CONTENT_MAX, VALUE_MAX, LOG_CAP],
])
def test_drain_with_a_bad_argument_writes_nothing(store, scripts, keys, args):
    raw_post(store, keys, {"content": "no sender"})
    store.post(ROOM, "User", "hi")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADARG"):
        scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                            keys.log(ROOM), keys.dead_letters(ROOM), keys.events(ROOM)], args=args)
    assert snapshot(store, keys) == before


# --- commit: the whole payload is checked before the message is appended


def open_turn(scripts: Scripts, keys: Keys, deadline: str = "2000000000.0") -> list:
    return scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                                   keys.events(ROOM)],
                             args=[TOKEN, deadline, "1000.0", EVENTS_CAP])


def good_payload() -> dict:
    return {
        "message": {"sender": "A", "content": "hello", "score": "0.9", "turn": "1"},
        "fields": {"recent": orjson.dumps(["A"]).decode()},
        "usage": {"prompt_tokens": "10", "agent:A:prompt_tokens": "10"},
        "stop": {"status": "idle", "reason": "lull", "detail": ""},
        "record": {"turn": "1", "winner": "A"},
        "turns_maxlen": "1000",
        "log_maxlen": "0",
        "events_maxlen": "1000",
    }


def commit(scripts: Scripts, keys: Keys, payload: object, expected_seq: int = 1,
           turn: int = 1) -> int:
    raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return int(scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM),
                                    keys.turns(ROOM), keys.events(ROOM)],
                           args=[TOKEN, turn, expected_seq, raw]))


def with_payload(**changes: object) -> dict:
    payload = good_payload()
    for name, value in changes.items():
        if value is ...:
            del payload[name]
        else:
            payload[name] = value
    return payload


BAD_PAYLOADS = [
    (b"{not json", "payload is not a JSON object"),
    (b"[1, 2]", "payload is not a JSON object"),
    (with_payload(usage={"prompt_tokens": "lots"}), "usage prompt_tokens"),
    (with_payload(usage={"cost_usd": "inf"}), "usage cost_usd"),
    (with_payload(turns_maxlen="many"), "turns_maxlen"),
    (with_payload(turns_maxlen=...), "turns_maxlen"),
    (with_payload(log_maxlen="-1"), "log_maxlen"),
    (with_payload(log_maxlen=...), "log_maxlen"),
    (with_payload(events_maxlen="1e9"), "events_maxlen"),
    (with_payload(events_maxlen=...), "events_maxlen"),
    (with_payload(fields=None), "fields"),
    (with_payload(record=...), "record"),
    (with_payload(record={"turn": None}), "record turn"),
    (with_payload(record={"seq": "9"}), "record seq"),
    (with_payload(message={"sender": "A"}), "message content"),
    (with_payload(message={"sender": "A", "content": "x", "score": None}), "message score"),
    (with_payload(message={"sender": "A", "content": "x", "seq": "7"}), "message seq"),
    (with_payload(stop={"status": "running", "reason": "lull", "detail": ""}), "stop status"),
    (with_payload(stop={"status": "idle", "reason": "lull"}), "stop detail"),
]


@pytest.mark.parametrize(("payload", "problem"), BAD_PAYLOADS)
def test_commit_with_a_bad_payload_writes_nothing(store, scripts, keys, payload, problem):
    store.post(ROOM, "User", "task")
    drain(scripts, keys)
    open_turn(scripts, keys)
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match=f"BADPAYLOAD {problem}"):
        commit(scripts, keys, payload)
    assert snapshot(store, keys) == before


def test_commit_onto_a_usage_total_that_is_not_a_number_writes_nothing(store, scripts, keys):
    store.post(ROOM, "User", "task")
    drain(scripts, keys)
    open_turn(scripts, keys)
    store.redis.hset(keys.state(ROOM), "agent:A:prompt_tokens", "plenty")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADSTATE agent:A:prompt_tokens"):
        commit(scripts, keys, good_payload())
    assert snapshot(store, keys) == before


def test_a_good_commit_still_writes_everything(store, scripts, keys):
    store.post(ROOM, "User", "task")
    drain(scripts, keys)
    open_turn(scripts, keys)
    assert commit(scripts, keys, good_payload()) == 2
    state = store.read_state(ROOM)
    assert (state.last_seq, state.status, state.stop_reason, state.turn_open) == (
        2, "idle", "lull", False)
    assert store.redis.xlen(keys.turns(ROOM)) == 1


def test_the_turns_stream_is_capped(store, scripts, keys):
    store.post(ROOM, "User", "task")
    drain(scripts, keys)
    payload = with_payload(message=..., stop=..., turns_maxlen="100")
    for _ in range(600):
        turn, _, _ = open_turn(scripts, keys)
        commit(scripts, keys, payload, turn=turn)
    assert 100 <= store.redis.xlen(keys.turns(ROOM)) <= 200


# --- open_turn and end_run


@pytest.mark.parametrize("deadline", ["soon", "nan", "inf", ""])
def test_open_turn_with_a_bad_deadline_writes_nothing(store, scripts, keys, deadline):
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADARG deadline"):
        open_turn(scripts, keys, deadline)
    assert snapshot(store, keys) == before


def test_open_turn_on_a_broken_turn_counter_writes_nothing(store, scripts, keys):
    store.redis.hset(keys.state(ROOM), "turn", "7.5")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADSTATE turn"):
        open_turn(scripts, keys)
    assert snapshot(store, keys) == before


@pytest.mark.parametrize("status", ["running", "", "done"])
def test_end_run_with_a_status_a_run_cannot_end_in_writes_nothing(store, scripts, keys, status):
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADARG status"):
        scripts.end_run(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=[TOKEN, status, "lull", "", 1000])
    assert snapshot(store, keys) == before


def test_acquire_with_a_bad_ttl_does_not_bump_the_epoch(store, keys, any_redis):
    scripts = Scripts(any_redis)
    with pytest.raises(redis.ResponseError, match="BADARG"):
        scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=["c1", "soon", 1000])
    assert RoomState(any_redis.hgetall(keys.state(ROOM))).epoch == 0


# --- the events stream's cap is an argument like the others


def test_acquire_with_a_bad_events_cap_does_not_bump_the_epoch(store, keys, any_redis):
    scripts = Scripts(any_redis)
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=["c1", 5000, "~100"])
    assert RoomState(any_redis.hgetall(keys.state(ROOM))).epoch == 0
    assert any_redis.xlen(keys.events(ROOM)) == 0


@pytest.mark.parametrize("cap", ["", "lots", "1" * 16])
def test_open_turn_end_run_and_count_failed_take_with_a_bad_events_cap_write_nothing(
        store, scripts, keys, cap):
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                                keys.events(ROOM)], args=[TOKEN, "2000000000.0", "1000.0", cap])
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.end_run(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=[TOKEN, "idle", "lull", "", cap])
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.count_failed_take(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                                        keys.events(ROOM)], args=[TOKEN, 1, "boom", cap])
    assert snapshot(store, keys) == before


@pytest.mark.parametrize("cap", ["", "lots", "1" * 16])
def test_cancel_pause_resume_and_answers_with_a_bad_events_cap_write_nothing(
        store, scripts, keys, cap):
    store.post(ROOM, "User", "go")
    drain(scripts, keys)  # a run in progress: a cancel would end it
    before = (snapshot(store, keys), store.redis.get(keys.lease(ROOM)),
              store.redis.xrange(keys.bids(ROOM)))
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.cancel(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                             keys.events(ROOM)], args=["stop", cap])
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.pause(keys=[keys.state(ROOM), keys.events(ROOM)], args=["1000.0", cap])
    store.redis.hset(keys.state(ROOM), "paused", 1)  # a resume would clear it
    with pytest.raises(redis.ResponseError, match="BADARG the events stream cap"):
        scripts.resume(keys=[keys.state(ROOM), keys.inbox(ROOM), keys.events(ROOM)], args=[cap])
    store.redis.hdel(keys.state(ROOM), "paused")
    with pytest.raises(redis.ResponseError, match="BADARG the caps"):
        scripts.write_answers(keys=[keys.state(ROOM), keys.bids(ROOM), keys.events(ROOM),
                                 keys.answer_ids(ROOM)],
                           args=[100, cap, "", 1, "agent", "A", 1, "agent", "A", 0])
    assert (snapshot(store, keys), store.redis.get(keys.lease(ROOM)),
            store.redis.xrange(keys.bids(ROOM))) == before


@pytest.mark.parametrize("args", [
    [100, 100, "", 1, "agent", "A"],  # no count of the event's pairs
    [100, 100, "", 1, "agent", "A", 2, "agent", "A"],  # fewer pairs than counted
    [100, 100, "", 0, 0, 0],  # an answer without fields
    [100, 100, "", 1, "agent", "A", 0],  # no count of the increments
    [100, 100, "", 1, "agent", "A", 0, 1, "cost_usd"],  # an increment without its amount
])
def test_answers_that_are_not_counted_pairs_write_nothing(store, keys, any_redis, args):
    with pytest.raises(redis.ResponseError, match="BADARG an answer needs"):
        write_bids_raw(any_redis, keys, args)
    assert any_redis.xlen(keys.bids(ROOM)) == any_redis.xlen(keys.events(ROOM)) == 0


def write_bids_raw(client: redis.Redis, keys: Keys, args: list) -> int:
    return Scripts(client).write_answers(keys=[keys.state(ROOM), keys.bids(ROOM), keys.events(ROOM),
                                            keys.answer_ids(ROOM)], args=args)


@pytest.mark.parametrize("amount", ["lots", "inf", "nan", ""])
def test_an_answer_whose_cost_is_not_a_finite_number_writes_nothing(store, keys, any_redis,
                                                                     amount):
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADARG cost_usd increment is not a finite"):
        write_bids_raw(any_redis, keys, [100, 100, "", 1, "agent", "A", 0,
                                         2, "prompt_tokens", "10", "cost_usd", amount])
    assert snapshot(store, keys) == before
    assert any_redis.xlen(keys.bids(ROOM)) == any_redis.xlen(keys.events(ROOM)) == 0


def test_an_answer_whose_total_is_not_a_number_writes_nothing(store, keys, any_redis):
    any_redis.hset(keys.state(ROOM), "cost_usd", "a lot")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match="BADSTATE cost_usd is not a number"):
        store.write_answers(ROOM, [Answer(agent="A", turn=1, prompt_tokens=10, cost_usd=0.5)], 100)
    assert snapshot(store, keys) == before
    assert any_redis.xlen(keys.bids(ROOM)) == any_redis.xlen(keys.events(ROOM)) == 0


# --- counts stay below their limit: a script refuses with OVERFLOW, writing nothing

LAST = COUNT_LIMIT - 1  # the highest count a room may hold


def acquire(scripts: Scripts, keys: Keys) -> int:
    return int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=["c2", 5000, EVENTS_CAP]))


def everything_of(store: RoomStore, keys: Keys) -> tuple:
    """snapshot() and the lease, which acquire writes."""
    return snapshot(store, keys), store.redis.get(keys.lease(ROOM))


@pytest.mark.parametrize("epoch", [str(2**63 - 1), str(LAST)])
def test_acquire_of_a_room_whose_epoch_is_at_its_limit_writes_nothing(store, keys, any_redis,
                                                                       epoch):
    any_redis.hset(keys.state(ROOM), "epoch", epoch)
    before = everything_of(store, keys)
    with pytest.raises(redis.ResponseError, match=f"OVERFLOW epoch {epoch} "):
        acquire(Scripts(any_redis), keys)
    assert everything_of(store, keys) == before


def test_acquire_of_a_room_whose_epoch_is_not_a_count_writes_nothing(store, keys, any_redis):
    any_redis.hset(keys.state(ROOM), "epoch", "1.5")
    before = everything_of(store, keys)
    with pytest.raises(redis.ResponseError, match="BADSTATE epoch is not a count"):
        acquire(Scripts(any_redis), keys)
    assert everything_of(store, keys) == before


@pytest.mark.parametrize("field", ["turn", "run_turns"])
def test_open_turn_on_a_turn_count_at_its_limit_writes_nothing(store, scripts, keys, field):
    store.redis.hset(keys.state(ROOM), field, LAST)
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match=f"OVERFLOW {field} {LAST} "):
        open_turn(scripts, keys)
    assert snapshot(store, keys) == before


@pytest.mark.parametrize(("fields", "refused"), [
    ({"last_seq": LAST - 1}, "last_seq"),  # two posts would take it to the limit
    ({"run": LAST}, "run"),  # the posts would start a run
    ({"status": "running", "messages_in_run": LAST - 1}, "messages_in_run"),
])
def test_drain_that_would_take_a_count_to_its_limit_writes_nothing(store, scripts, keys,
                                                                    fields, refused):
    store.redis.hset(keys.state(ROOM), mapping=fields)
    store.post(ROOM, "User", "one")
    store.post(ROOM, "User", "two")
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match=f"OVERFLOW {refused} "):
        drain(scripts, keys)
    assert snapshot(store, keys) == before


@pytest.mark.parametrize(("fields", "refused"), [
    ({"last_seq": LAST}, "last_seq"),
    ({"messages_in_run": LAST}, "messages_in_run"),
    ({"prompt_tokens": COUNT_LIMIT - 10}, "prompt_tokens"),
    ({"agent:A:prompt_tokens": "9.9999999999995e13"}, "agent:A:prompt_tokens"),
])
def test_commit_that_would_take_a_count_or_total_to_its_limit_writes_nothing(
        store, scripts, keys, fields, refused):
    store.post(ROOM, "User", "task")
    drain(scripts, keys)
    store.redis.hset(keys.state(ROOM), mapping=fields)
    open_turn(scripts, keys)
    expected_seq = int(store.redis.hget(keys.state(ROOM), "last_seq"))
    before = snapshot(store, keys)
    with pytest.raises(redis.ResponseError, match=f"OVERFLOW {refused} "):
        commit(scripts, keys, good_payload(), expected_seq=expected_seq)
    assert snapshot(store, keys) == before


def test_a_floor_change_that_would_start_a_run_past_the_limit_writes_nothing(store, keys):
    store.redis.hset(keys.state(ROOM), "run", LAST)
    before = (snapshot(store, keys), store.redis.xlen(keys.floor_ops(ROOM)))
    with pytest.raises(redis.ResponseError, match=f"OVERFLOW run {LAST} "):
        store.floor_op(ROOM, "talk", "A")
    assert (snapshot(store, keys), store.redis.xlen(keys.floor_ops(ROOM))) == before


def test_a_failed_take_count_at_the_limit_starts_over(store, scripts, keys):
    store.redis.hset(keys.state(ROOM), "failed_takes", LAST)
    failed_takes, failed = scripts.count_failed_take(
        keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.events(ROOM)],
        args=[TOKEN, 3, "boom", EVENTS_CAP])
    assert (failed_takes, failed) == (1, 0)


def test_the_scripts_limit_is_the_one_python_checks():
    scripts_limit = re.search(r"^local COUNT_LIMIT = (\S+)$", source("acquire"), re.MULTILINE)
    assert scripts_limit is not None and float(scripts_limit[1]) == COUNT_LIMIT


def run_started_events(store: RoomStore, keys: Keys) -> list[bytes]:
    return [fields[b"run"] for _, fields in store.redis.xrange(keys.events(ROOM))
            if fields[b"type"] == b"run_started"]


def test_a_floor_change_in_an_idle_room_starts_the_next_run_once(store, keys):
    store.redis.hset(keys.state(ROOM), mapping={"status": "done", "run": 2, "policy:x": 1,
                                                "messages_in_run": 5})
    before = run_started_events(store, keys)
    store.floor_op(ROOM, "talk", "A")
    store.floor_op(ROOM, "listen", "A")  # the run is in progress now: no other starts
    state = store.redis.hgetall(keys.state(ROOM))
    assert (state[b"status"], state[b"run"], state[b"messages_in_run"]) == (b"running", b"3", b"0")
    assert b"policy:x" not in state
    assert run_started_events(store, keys) == [*before, b"3"]
