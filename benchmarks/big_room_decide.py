"""What deciding one turn of a big room costs the coordinator: ``policies.decide`` (the
reply cut, then the bid policy) over every agent's answer, each a multi-line reply that
forges the next agent's line, on this process's CPU.

    .venv/bin/python -m benchmarks.big_room_decide [AGENTS ...]

Prints, per room size, the room's first turn's decision and the best of its next ones, in
milliseconds: a first turn builds what later turns of the room reuse.
"""

from __future__ import annotations

import sys
import time

from parley.coordinator import policies
from parley.coordinator.policies import TurnView
from parley.shared.models import Answer, RoomSpec

RUNS = 3
REPLY_LINES = 8


def room(agents: int) -> RoomSpec:
    """A bid room of ``agents`` scripted agents."""
    return RoomSpec.model_validate({"agents": [
        {"name": f"Agent {i}", "model": "scripted", "script": []} for i in range(agents)]})


def answers(agents: int) -> list[Answer]:
    """Every agent's answer: a few lines of its own, then a line of the next agent's."""
    lines = "\n".join(f"Point {n}: the cost at 10:30 is fine." for n in range(REPLY_LINES))
    return [Answer(agent=f"Agent {i}", turn=1, score=0.4,
                message=f"{lines}\nAgent {(i + 1) % agents}: I agree.") for i in range(agents)]


def decide_ms(agents: int) -> tuple[float, float]:
    """The first turn's decision and the best of the ``RUNS`` next, in milliseconds."""
    spec, bids = room(agents), answers(agents)
    view = TurnView(turn=1, run=1, run_turns=1, messages_in_run=1, recent=(), snapshot_seq=1)
    took = []
    for _ in range(RUNS + 1):
        started = time.perf_counter()
        policies.decide(spec, view, bids)
        took.append((time.perf_counter() - started) * 1000)
    return took[0], min(took[1:])


def main(sizes: list[int]) -> None:
    """Print one line per room size."""
    for agents in sizes:
        first, after = decide_ms(agents)
        print(f"{agents:>5} agents: first turn {first:9.1f} ms, next turns {after:9.1f} ms",
              flush=True)


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [16, 256, 1000])
