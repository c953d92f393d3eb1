"""A posted message's text, written to the room's events stream as the model writes it.

Providers send a token or two per delta; one event per delta would flood a room's capped
events stream and cost a Redis write per token. Deltas are coalesced: the first goes out at
once (a follower sees the reply start as soon as it does), then what came meanwhile goes
out once ``CHUNK_S`` seconds passed since the last chunk, and the rest when the call ends.
A reply costs at most ten events a second however fast it comes: a 200-token reply at 50
tokens a second about 40.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from parley.shared.silent_token import is_silent, may_become_silent

CHUNK_S = 0.1

# Writes one chunk (index, text); False when it was not written (the turn is over).
ChunkSink = Callable[[int, str], bool]


class ChunkWriter:
    """Collects one call's deltas and writes them as numbered chunks through ``sink``.

    ``hold``: text not to show while the reply may still turn out to be it (a mention
    room's silent token: a reply that is only the token posts nothing, so shows nothing).
    """

    def __init__(self, sink: ChunkSink, hold: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sink = sink
        self.hold = hold.strip()
        self.clock = clock
        self.text = ""  # everything received
        self.sent = 0  # characters of ``text`` written
        self.index = 0
        self.last = 0.0

    def write(self, delta: str) -> None:
        """Take one delta; write what is pending when it is due."""
        if not delta:
            return
        self.text += delta
        if self.held():
            return
        if self.index == 0 or self.clock() - self.last >= CHUNK_S:
            self.flush()

    def held(self) -> bool:
        """True while everything received could still be the held text, read as a
        silent token is read (case, a final period and brackets aside)."""
        return bool(self.hold) and may_become_silent(self.text, self.hold)

    def flush(self) -> None:
        """Write what is pending (nothing while held)."""
        if not self.held():
            self._write()

    def restart(self) -> None:
        """Drop what was received: the call's text starts over, its next chunk written at
        once as chunk 0 (a follower drops what chunk 0 follows)."""
        self.text, self.sent, self.index = "", 0, 0

    def finish(self) -> None:
        """Write the rest once the reply is whole: all of it, unless it is the held text."""
        if not (self.hold and is_silent(self.text, self.hold)):
            self._write()

    def _write(self) -> None:
        if self.sent == len(self.text):
            return
        chunk, self.sent = self.text[self.sent:], len(self.text)
        self.sink(self.index, chunk)
        self.index += 1
        self.last = self.clock()

    @property
    def chunks(self) -> int:
        """How many chunks were written."""
        return self.index
