"""The coordinator acts on a signal through the interpreter's handler, which queues the
callback on its event loop: a loop whose wakeup socket is full still gets it."""

from __future__ import annotations

import asyncio
import os
import signal

from parley.coordinator.signals import on_signal


def test_a_signal_runs_its_callback_on_the_loop_even_with_the_loops_wakeup_socket_full():
    async def signalled() -> list[str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        done = asyncio.Event()
        previous = signal.getsignal(signal.SIGUSR1)
        on_signal(loop, signal.SIGUSR1, lambda what: (seen.append(what), done.set()), "usr1")
        try:
            # Fill the loop's self-pipe as a busy loop's other threads would.
            wakeup = loop._csock  # type: ignore[attr-defined]
            wakeup.setblocking(False)
            try:
                while True:
                    wakeup.send(b"\0")
            except BlockingIOError:
                pass
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.wait_for(done.wait(), 5)
        finally:
            signal.signal(signal.SIGUSR1, previous)
        return seen

    assert asyncio.run(signalled()) == ["usr1"]
