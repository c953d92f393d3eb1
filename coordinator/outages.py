"""When this coordinator last could not reach Redis or the broker, and which turns it gave
their time again for that.

A turn whose bid window overlapped an outage is not counted as unanswered: the workers
were cut off as well and come back some time after Redis does. Such a turn gets its full
bid time again, counted from a moment the coordinator reached Redis again; once per
outage, and at most ``MAX_GRACES`` times, so that a flapping Redis cannot keep a room's
turn open forever.

The scan, the lease keeper (from the thread reading its process's reports) and the rooms
record failures; recording one is a single float write, so that thread needs no lock. The graces are kept
and read on the rooms' event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from parley.coordinator.connections import unusable

# A turn is given its time again at most this often, whatever the outages.
MAX_GRACES = 3


@dataclass(frozen=True)
class Grace:
    """The turn of a room last given its time again, when, and how many times so far."""

    turn: int
    opened_at: float
    given_at: float
    count: int


def grace_due(failed_at: float, opened_at: float, last: Grace | None,
              max_graces: int = MAX_GRACES) -> bool:
    """True when Redis or the broker failed since the turn opened and since the turn's last
    grace, and the turn has graces left."""
    if last is None:
        return failed_at > opened_at
    return last.count < max_graces and failed_at > max(opened_at, last.given_at)


class OutageClock:
    """The wall-clock time this coordinator last failed to reach Redis or the broker, and
    per room the grace last given to its turn in flight."""

    def __init__(self, max_graces: int = MAX_GRACES,
                 clock: Callable[[], float] = time.time) -> None:
        self.max_graces = max_graces
        self.clock = clock
        # Wall clock, as the turns' opening times and deadlines are.
        self.failed_at = 0.0
        self.graces: dict[str, Grace] = {}

    def failed(self) -> None:
        """Record that Redis or the broker could not be reached just now."""
        self.failed_at = self.clock()

    def note_unreachable(self, error: BaseException) -> None:
        """Record the time if ``error`` says Redis or the broker could not be reached or
        used (a full Redis is an outage; one room's refused command is none)."""
        if unusable(error):
            self.failed()

    def give_time_again(self, room: str, turn: int, opened_at: float) -> bool:
        """True (and counted) when the room's turn overlapped an outage it was not yet given
        its time again for; call it only once Redis answers again."""
        last = self.graces.get(room)
        if last is not None and (last.turn, last.opened_at) != (turn, opened_at):
            last = None
        if not grace_due(self.failed_at, opened_at, last, self.max_graces):
            return False
        count = 1 if last is None else last.count + 1
        self.graces[room] = Grace(turn, opened_at, self.clock(), count)
        return True

    def forget(self, room: str) -> None:
        """Drop the room's grace once its turn is decided."""
        self.graces.pop(room, None)
