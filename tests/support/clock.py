"""A clock the test moves by hand, for code that takes its clock as a parameter (a
callable returning seconds, defaulting to the real one)."""

from __future__ import annotations


class FakeClock:
    """Returns ``now``, which changes only when the test moves it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        self.now += seconds
