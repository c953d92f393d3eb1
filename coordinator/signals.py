"""How the coordinator acts on a signal (SIGTERM, SIGINT, and its debug signals)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any


def on_signal(loop: asyncio.AbstractEventLoop, signum: int, callback: Callable[..., None],
              *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop`` when ``signum`` arrives, however busy the loop.

    asyncio's own signal handlers learn of a signal from a byte on the loop's wakeup
    socket; a loop too busy to read that socket while other threads wake it (the Celery
    publishes, the lease keeper's reports) finds it full, and the signal is lost. Here the
    interpreter's handler queues the callback on the loop itself, which loses nothing.
    """
    signal.signal(signum, lambda *_: loop.call_soon_threadsafe(callback, *args))
