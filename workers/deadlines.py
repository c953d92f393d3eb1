"""Every call ends at its deadline: whatever a call waits on (a script's sleep, a rate
limit's backoff, a stream's next chunk) stops waiting there, so a call past its deadline
never holds a worker's slot, and a worker shutting down never waits for one.

==========================  ==========================================================
wait                        ends
==========================  ==========================================================
a script's ``sleep``        at the deadline (the call fails ``timeout``), or at once
                            when the worker shuts down (the entry answers now)
a rate limit's backoff      before the deadline, or at shutdown (the call fails with
                            the rate limit)
a stream's next chunk       at the deadline (the call fails ``timeout``); the read in
                            progress ends with its own timeout, on a thread that does
                            not hold the worker's exit
==========================  ==========================================================
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# Set when the worker starts to shut down (workers.app): sleeps wake at once.
STOPPING = threading.Event()


class DeadlinePassed(TimeoutError):
    """The call's deadline came before it could (go on and) finish."""


def pause(seconds: float, deadline: float, what: str) -> None:
    """Sleep ``seconds`` unless the deadline comes first: then raise DeadlinePassed at the
    deadline, naming ``what`` slept. Returns at once when the worker shuts down."""
    left = deadline - time.time()
    if seconds <= left:
        STOPPING.wait(seconds)
        return
    if not STOPPING.wait(max(0.0, left)):
        raise DeadlinePassed(f"{what} of {seconds:g}s outlasted the call's deadline")


def until_deadline(items: Iterable[T], deadline: float) -> Iterator[T]:
    """``items`` as they come, read on a thread of their own; DeadlinePassed as soon as
    the deadline comes before the next one. The abandoned read ends with its own timeout
    (its thread is a daemon: it holds up neither the call nor the worker's exit), and
    then closes ``items`` if they can be closed."""
    handed: queue.Queue[tuple[bool, Any]] = queue.Queue()  # (done, item or error or None)
    abandoned = threading.Event()

    def read() -> None:
        try:
            for item in items:
                if abandoned.is_set():
                    break
                handed.put((False, item))
        except BaseException as error:  # noqa: BLE001 - the call's thread raises it
            handed.put((True, error))
        else:
            handed.put((True, None))
        finally:
            if abandoned.is_set() and callable(close := getattr(items, "close", None)):
                close()

    # In the call's context: its log fields (room, turn) go with what the reader logs.
    threading.Thread(target=contextvars.copy_context().run, args=(read,), name="call-stream",
                     daemon=True).start()
    try:
        while True:
            left = deadline - time.time()
            try:
                if left <= 0:
                    raise queue.Empty
                done, value = handed.get(timeout=left)
            except queue.Empty:
                raise DeadlinePassed("the reply was still streaming at the deadline") from None
            if done and value is not None:
                raise value
            if done:
                return
            yield value
    finally:
        abandoned.set()
