"""A coordinator's debug signals, for benchmarks and tests (``coordinator_debug_signals``):
SIGUSR1 forces a full garbage collection of its heap, SIGUSR2 holds its main thread busy.
Both run on the rooms' event loop, as the pauses they stand for would. And, always on, the
log line of each long full collection the interpreter chose: every thread waits for it."""

from __future__ import annotations

import asyncio
import gc
import signal
import time

import structlog

from parley.coordinator.signals import on_signal

log = structlog.get_logger("parley.coordinator")

# A full collection at least this long is logged (gc_paused): it holds every thread.
LOGGED_PAUSE_S = 0.2


def collect_garbage() -> None:
    """Collect every generation now, as a full collection the interpreter chose would."""
    started = time.perf_counter()
    collected = gc.collect()
    log.warning("debug_gc", collected=collected,
                seconds=round(time.perf_counter() - started, 3), objects=len(gc.get_objects()))


def hold_busy(seconds: float) -> None:
    """Keep the main thread computing for ``seconds``: its event loop runs nothing else."""
    log.warning("debug_busy", seconds=seconds)
    until = time.monotonic() + seconds
    spins = 0
    while time.monotonic() < until:
        spins += 1
    log.warning("debug_busy_done", spins=spins)


def add_signal_handlers(loop: asyncio.AbstractEventLoop, busy_s: float) -> None:
    """SIGUSR1: a full collection; SIGUSR2: the main thread held busy for ``busy_s``."""
    on_signal(loop, signal.SIGUSR1, collect_garbage)
    on_signal(loop, signal.SIGUSR2, hold_busy, busy_s)


def log_long_collections() -> None:
    """Log each collection of the oldest generation that took ``LOGGED_PAUSE_S`` or more."""
    started = 0.0

    def timed(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if info["generation"] != 2:
            return
        if phase == "start":
            started = time.perf_counter()
        elif (seconds := time.perf_counter() - started) >= LOGGED_PAUSE_S:
            log.warning("gc_paused", seconds=round(seconds, 3), collected=info["collected"])

    gc.callbacks.append(timed)
