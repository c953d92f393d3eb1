"""The coordinator's script calls on one room, made by hand as the store tests make them:
take the lease, drain the inbox, open a turn, commit it. The room is ``ROOM``, created by
the integration layer's ``store`` fixture with agents A and B."""

from __future__ import annotations

import orjson

from parley.shared.keys import Keys
from parley.shared.scripts import Scripts

ROOM = "r1"
# Long enough to outlive a test of hundreds of turns on a loaded machine; the tests of
# expiry give their leases 150 ms.
TTL_MS = 300_000

# dead-letter cap, sender, message and dead-letter value limits, log cap (0: never
# trimmed), events cap
DRAIN_LIMITS = [100, 128, 65536, 1024, 0, 1000]


def acquire(scripts: Scripts, keys: Keys, owner: str, ttl_ms: int = TTL_MS) -> int:
    """Take the room's lease as ``owner``; its epoch, or 0 when someone holds it."""
    return int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=[owner, ttl_ms, 1000]))


def renew(scripts: Scripts, keys: Keys, owner: str, epoch: int, ttl_ms: int = TTL_MS
          ) -> list[int]:
    """Renew the room's lease as ``owner`` under ``epoch``, leaving its due time alone."""
    return list(scripts.renew(keys=[keys.lease(ROOM)], args=[ttl_ms, owner, 0, 0, epoch]))


def drain(scripts: Scripts, keys: Keys, token: str) -> int:
    """Move the room's posts to its log as the holder of ``token``; how many moved."""
    moved, _, _ = scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                                      keys.log(ROOM), keys.dead_letters(ROOM), keys.events(ROOM)],
                                args=[token, 1, 100, *DRAIN_LIMITS])
    return int(moved)


def open_turn(scripts: Scripts, keys: Keys, token: str) -> list:
    """Open the room's next turn as the holder of ``token``."""
    return scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                                   keys.events(ROOM)],
                             args=[token, "2000000000.0", "1000.0", 1000])


def commit(scripts: Scripts, keys: Keys, token: str, turn: int, expected_seq: int,
           sender: str = "A") -> int:
    """Commit ``sender``'s message as ``turn``'s winner; the new last seq."""
    payload = {
        "message": {"sender": sender, "content": "hello", "score": "0.9", "turn": str(turn)},
        "fields": {"recent": orjson.dumps([sender]).decode()},
        "usage": {"prompt_tokens": "10", f"agent:{sender}:prompt_tokens": "10"},
        "record": {"turn": str(turn), "winner": sender},
        "turns_maxlen": "1000",
        "log_maxlen": "0",
        "events_maxlen": "1000",
    }
    return int(scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM),
                                    keys.turns(ROOM), keys.events(ROOM)],
                              args=[token, turn, expected_seq, orjson.dumps(payload)]))
