"""The run's trace context through the scripts, on fakeredis and on the real Redis: a
post's traceparent goes with its inbox entry, the post that starts a run gives the run its
run_traceparent, open_turn keeps the run's trace, and a new run forgets both."""

from __future__ import annotations

from parley.shared import tracing
from tests.support.script_calls import ROOM, acquire, drain, open_turn

POSTED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
RUN = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"


def post_traced(store, scripts, keys, content: str, traceparent: str) -> None:
    scripts.post(keys=[keys.spec(ROOM), keys.state(ROOM), keys.inbox(ROOM)],
                 args=["User", content, "1700000000.0", traceparent])


def test_the_post_that_starts_a_run_gives_it_its_trace(store, scripts, keys):
    acquire(scripts, keys, "c1")
    post_traced(store, scripts, keys, "first", POSTED)
    post_traced(store, scripts, keys, "second", RUN)  # not the first: no say in the run
    assert drain(scripts, keys, "c1:1") == 2
    assert store.read_state(ROOM).run_traceparent == POSTED
    assert [m.content for m in store.read_messages(ROOM)] == ["first", "second"]

    scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                            keys.events(ROOM)],
                      args=["c1:1", "2000000000.0", "1000.0", 1000, RUN])
    assert store.read_state(ROOM).trace == RUN


def test_an_untraced_post_or_turn_writes_no_trace_field(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "hello")  # tracing off: no traceparent
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    state = store.read_state(ROOM)
    assert (state.run_traceparent, state.trace) == ("", "")
    assert not tracing.on()


def test_a_traceparent_too_long_to_be_one_is_not_kept(store, scripts, keys):
    acquire(scripts, keys, "c1")
    post_traced(store, scripts, keys, "hi", "0" * 500)
    assert drain(scripts, keys, "c1:1") == 1
    assert store.read_state(ROOM).run_traceparent == ""


def test_a_new_run_forgets_the_last_runs_trace(store, scripts, keys):
    acquire(scripts, keys, "c1")
    post_traced(store, scripts, keys, "first", POSTED)
    drain(scripts, keys, "c1:1")
    # The run ended (as end_run leaves it) with its trace kept; an untraced post starts
    # the next run, which must not continue the last one's trace.
    store.redis.hset(keys.state(ROOM), mapping={"status": "idle", "trace": RUN})
    store.post(ROOM, "User", "again")
    drain(scripts, keys, "c1:1")
    state = store.read_state(ROOM)
    assert (state.run, state.run_traceparent, state.trace) == (2, "", "")
