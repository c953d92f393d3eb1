"""RepeatLimit: a warning or error repeated many times a second (by every connection of a
flood, or by a failing loop) is written once a second, the next one saying how many like
it were left out; other kinds and info records pass."""

from __future__ import annotations

import logging

from parley.shared.logs import RepeatLimit


def record(message: object, level: int = logging.WARNING, name: str = "asyncio"
           ) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_a_repeated_warning_passes_once_a_second_and_the_next_says_how_many_were_left_out():
    now = [100.0]
    limit = RepeatLimit(interval_s=1.0, clock=lambda: now[0])
    accept_failed = "socket.accept() out of system resource"
    assert limit.filter(record(accept_failed))
    assert not any(limit.filter(record(accept_failed)) for _ in range(1000))
    assert limit.filter(record("another failure"))
    assert limit.filter(record(accept_failed, name="uvicorn.error"))
    now[0] += 1.0
    later = record(accept_failed)
    assert limit.filter(later)
    assert later.getMessage() == f"{accept_failed} [1000 more like this left out]"
    assert not limit.filter(record(accept_failed))


def test_a_structlog_event_is_limited_by_its_name_and_info_always_passes():
    limit = RepeatLimit(interval_s=1.0, clock=lambda: 5.0)
    refusing = {"event": "refusing connections: too many open", "limit": 5}
    assert limit.filter(record(dict(refusing), name="parley.api"))
    assert not limit.filter(record({**refusing, "limit": 6}, name="parley.api"))
    access = '%s - "%s %s HTTP/%s" %d'
    assert all(limit.filter(record(access, logging.INFO, "uvicorn.access")) for _ in range(100))
