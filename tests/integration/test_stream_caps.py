"""Bounded memory per room: every per-room stream but the log is capped by a setting, and the
default caps keep a busy room's capped streams under the figure the docs state."""

from __future__ import annotations

import fakeredis
import pytest
import redis

from benchmarks.stream_sizes import measure, measure_dead_letters, measure_events
from parley.coordinator.service import Coordinator
from parley.coordinator.transport import InMemoryTransport
from parley.shared.keys import Keys
from parley.shared.models import Answer
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec

ROOM = "r1"
STATED_MB = 40  # shared/settings.py, shared/keys.py and the README say "under about 40 MB"


def test_the_bids_stream_is_capped(any_redis: redis.Redis, keys: Keys):
    store = RoomStore(any_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    for turn in range(60):
        store.write_answers(ROOM, [Answer(agent=f"a{i}", turn=turn, message="m" * 100)
                                for i in range(10)], maxlen=100)
    # Approximate trimming drops whole stream nodes (at most 100 entries each).
    assert 100 <= any_redis.xlen(keys.bids(ROOM)) <= 200


def test_the_coordinator_caps_the_streams_it_writes_by_its_settings():
    settings = Settings(key_prefix="t", turns_stream_maxlen=123, dead_letter_stream_maxlen=45,
                        dead_letter_value_max_bytes=67, message_max_bytes=8900,
                        events_stream_maxlen=456)
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    coordinator = Coordinator(settings, InMemoryTransport(), "c1", client=client)
    assert coordinator.options.turns_maxlen == 123
    limits = coordinator.io.limits
    assert (limits.dead_letter_maxlen, limits.dead_letter_value_max_bytes,
            limits.message_max_bytes) == (45, 67, 8900)
    assert (coordinator.io.events_maxlen, coordinator.leases.events_maxlen) == (456, 456)


def test_the_workers_cap_the_events_they_write_by_their_settings(monkeypatch):
    from parley.workers import tasks

    # The worker's settings, as its app read them at start-up.
    monkeypatch.setattr(tasks, "settings", Settings(events_stream_maxlen=789))
    store_for = tasks.store_for.__wrapped__  # not the store cached for another prefix's test
    assert store_for("t").events_maxlen == 789


@pytest.mark.redis
def test_the_default_caps_keep_a_busy_room_under_the_stated_size(real_redis, keys):
    # The defaults as shipped, whatever this environment sets.
    defaults = Settings.model_construct()
    busiest = measure(real_redis, keys, agents=16, chars=1500)
    events = measure_events(real_redis, keys, agents=16, chars=1500)
    dead = measure_dead_letters(real_redis, keys, defaults)
    total = (busiest["turn_record_bytes"] * defaults.turns_stream_maxlen
             + busiest["bid_bytes"] * defaults.bids_stream_maxlen
             + events["event_bytes"] * defaults.events_stream_maxlen
             + dead["worst_dead_letter_bytes"] * defaults.dead_letter_stream_maxlen)
    assert total < STATED_MB * 1e6
