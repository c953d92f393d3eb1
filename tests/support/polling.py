"""Waiting for a condition with a deadline, instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not (value := checked(condition, deadline, timeout_s, what)):
        time.sleep(every_s)
    return value


async def wait_until_async(condition: Callable[[], T], timeout_s: float, what: str,
                           every_s: float = 0.005) -> T:
    """``wait_until`` on an event loop: the loop's other tasks run while it polls."""
    deadline = time.monotonic() + timeout_s
    while not (value := checked(condition, deadline, timeout_s, what)):
        await asyncio.sleep(every_s)
    return value


def checked(condition: Callable[[], T], deadline: float, timeout_s: float, what: str) -> T:
    """``condition()``; past ``deadline`` (a time.monotonic()) a falsy one fails the wait."""
    value = condition()
    if not value and time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
    return value
