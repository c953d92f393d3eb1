"""Watching a RoomStore's blocking reads, so that a test waits for a reader (``Client.wait``,
``follow``, ``events``) to be at its read, or to have been handed something, instead of
sleeping and hoping it got there. Works from any thread, on fakeredis or real Redis."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from parley.shared.events import Event
from parley.shared.store import RoomStore

# The store's blocking reads: wait_room returns (messages, events), wait_events the events.
BLOCKING_READS = ("wait_room", "wait_events")


class BlockingReads:
    """Counts the blocking reads ``store`` starts and keeps what each returned.

    A read counts as started once its caller has taken in everything it read before (the
    waiter's first read comes after it read the room's state): what is written from then
    on reaches the reader through the streams, whether it lands before the read blocks or
    while it does.
    """

    def __init__(self, store: RoomStore) -> None:
        self.started = 0
        self.returned: list[Any] = []
        self.changed = threading.Condition()
        for name in BLOCKING_READS:
            setattr(store, name, self.watched(getattr(store, name)))

    def watched(self, read: Callable[..., Any]) -> Callable[..., Any]:
        """``read``, counted when it starts and kept when it returns."""

        @functools.wraps(read)
        def watched_read(*args: Any, **kwargs: Any) -> Any:
            with self.changed:
                self.started += 1
                self.changed.notify_all()
            result = read(*args, **kwargs)
            with self.changed:
                self.returned.append(result)
                self.changed.notify_all()
            return result

        return watched_read

    def events_returned(self) -> list[Event]:
        """Every event the reads have handed on so far, in order."""
        events: list[Event] = []
        for result in self.returned:
            events += result[1] if isinstance(result, tuple) else result
        return events

    def wait_for(self, condition: Callable[[], object], what: str, timeout_s: float = 10) -> None:
        """Until ``condition()`` holds after a read started or returned; fail naming ``what``."""
        with self.changed:
            if not self.changed.wait_for(condition, timeout_s):
                raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")

    def wait_until_reading(self, timeout_s: float = 10) -> None:
        """Until the reader has started its first blocking read."""
        self.wait_for(lambda: self.started, "the reader to block on the room's streams",
                      timeout_s)

    def wait_until_handed(self, matches: Callable[[Event], bool], what: str,
                          timeout_s: float = 10) -> None:
        """Until a read has handed the reader an event that ``matches``."""
        self.wait_for(lambda: any(matches(event) for event in self.events_returned()),
                      f"the reader to be handed {what}", timeout_s)
