"""Rooms just taken open their first turn before the rooms already under way open their
next one.

A coordinator's rooms share its event loop and the workers. A standby taking a thousand
rooms starts them one after another; unordered, the rooms it started first go on turning,
and each of their turns costs what the rooms still to start wait for. So a room under way,
before it opens its next turn, waits until every room taken before that moment has opened
its first (or stopped), for ``MOST_WAIT_S`` at most: a room slow to start delays the
others no longer than that, and rooms taken later do not prolong the wait.
"""

from __future__ import annotations

import asyncio
import contextlib

# Long enough for a standby to start a thousand rooms on two cores; a turn waits no longer.
MOST_WAIT_S = 2.0


class FirstTurns:
    """The coordinator's rooms still to open a first turn, by the order they were taken."""

    def __init__(self, most_wait_s: float = MOST_WAIT_S) -> None:
        self.most_wait_s = most_wait_s
        self.taken = 0  # the last ticket given
        self.waiting: set[int] = set()  # tickets of rooms taken and not yet turning
        self.lowest = 1  # every ticket below this one has opened its first turn
        # One event per ticket that rooms under way wait behind, oldest first: every
        # room that waits between two takes waits for the same rooms.
        self.behind: dict[int, asyncio.Event] = {}

    def take(self) -> int:
        """A ticket for a room just taken."""
        self.taken += 1
        self.waiting.add(self.taken)
        return self.taken

    async def before_turn(self, ticket: int) -> None:
        """Before the room of ``ticket`` opens a turn: its first goes at once; a later one
        waits for the rooms taken by now to open their first."""
        if ticket in self.waiting:
            self.opened(ticket)
        else:
            await self._wait_turn()

    def opened(self, ticket: int) -> None:
        """The room of ``ticket`` opened its first turn, or stopped without one."""
        if ticket not in self.waiting:
            return
        self.waiting.discard(ticket)
        while self.lowest <= self.taken and self.lowest not in self.waiting:
            self.lowest += 1
        while self.behind:
            last = next(iter(self.behind))
            if last >= self.lowest:
                break
            self.behind.pop(last).set()

    async def _wait_turn(self) -> None:
        """Wait until every room taken so far has opened its first turn (or stopped), or
        for ``most_wait_s``."""
        last = self.taken
        if last < self.lowest:
            return
        event = self.behind.setdefault(last, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), self.most_wait_s)
