"""In-process anchor benchmark: the real swarms ``GroupChat`` driven by scripted stub agents.

Run it with the python of the swarms venv (see ``setup_venv.sh``)::

    benchmarks/.swarms-venv/bin/python benchmarks/swarms_anchor/run_anchor.py \
        --agents 2,4,8,16,32,40 --turns 40 --sleep 0,0.05 --history-turns 1000 \
        --json anchor.json

Workload (kept identical to the distributed benchmark so the ratios mean something):
N agents ``agent-0 .. agent-{N-1}``; on turn t (1-based) agent ``t mod N`` bids 0.9 and every
other agent bids 0.2, each with a non-empty message; threshold 0.5, recency_penalty 0.3,
recency_window 1, ``max_loops = T + 1`` (the user task counts as the first message), so every
turn has exactly one winner and the room reaches T turns. Each bid may sleep a fixed time to
stand in for LLM latency. No LLM client is ever built or called.

Timing method: ``GroupChat._run_async`` has no per-turn hook, so each chat instance gets its
``_post`` wrapped (instance attribute, the class is untouched) to stamp ``time.perf_counter()``
right after every post. Turn t's wall time is ``stamp[t] - stamp[t-1]``, where stamp 0 is the
post of the user task. That interval holds one full loop iteration: ``_collect_bids`` (N
``agent.run`` calls in GroupChat's thread pool, each preceded by ``messages_for`` over the whole
transcript), ``_select_speaker``, ``_post`` and the loop bookkeeping. It leaves out the one-off
set-up before the user task and the final ``history_output_formatter`` call. Turn 1 includes
the lazy start of the pool's threads, as it does on every ``GroupChat.run``.
Statistics: median via ``statistics.median``; p95 is the nearest-rank percentile.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from typing import Any

HIGH_BID = 0.9
LOW_BID = 0.2
THRESHOLD = 0.5
RECENCY_PENALTY = 0.3
RECENCY_WINDOW = 1
TASK = "Benchmark room: take turns as scripted."


def prepare_environment() -> tempfile.TemporaryDirectory | None:
    """Set the env swarms reads at import time; return the temp workspace to clean up, if any.

    swarms writes ``agent_workspace/`` into the current directory unless ``WORKSPACE_DIR`` is
    set, so a throwaway directory is used to keep the repository clean.
    """
    os.environ.setdefault("SWARMS_TELEMETRY_ON", "false")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if os.environ.get("WORKSPACE_DIR"):
        return None
    workspace = tempfile.TemporaryDirectory(prefix="swarms-anchor-")
    os.environ["WORKSPACE_DIR"] = workspace.name
    return workspace


class ScriptedAgent:
    """Duck-typed stand-in for ``swarms.Agent`` whose bids come from the benchmark script.

    With ``auto_equip=False`` GroupChat 16.x only reads ``agent_name``, saves/sets/restores
    ``output_type`` around each call and calls ``run(task=..., messages=...)``; ``channel`` is
    read only when the chat has a comms channel. ``run`` returns what a provider returns for a
    forced tool call: a list holding one ``respond`` tool-call dict with JSON-string arguments,
    which ``groupchat._extract_args`` parses back to ``(score, message)``.
    """

    def __init__(self, index: int, n_agents: int, sleep_s: float, respond_tool: dict) -> None:
        """Create ``agent-{index}`` of a room of ``n_agents``; each bid sleeps ``sleep_s``."""
        self.index = index
        self.n_agents = n_agents
        self.sleep_s = sleep_s
        self.agent_name = f"agent-{index}"
        self.output_type = "str-all-except-first"
        self.tools_list_dictionary = [respond_tool]
        self.channel = None
        self.calls = 0

    def llm_handling(self) -> Any:
        """Fail loudly if GroupChat ever tries to build an LLM client for this agent."""
        raise AssertionError("GroupChat tried to build an LLM client for a stub agent")

    def run(self, task: str, messages: list[dict[str, str]]) -> list[dict[str, Any]]:
        """Return this turn's scripted bid as a forced ``respond`` tool call."""
        # GroupChat hands every agent the whole transcript (user task + one reply per finished
        # turn), so its length is the 1-based number of the turn being bid on.
        turn = len(messages)
        self.calls += 1
        score = HIGH_BID if turn % self.n_agents == self.index else LOW_BID
        if self.sleep_s:
            time.sleep(self.sleep_s)
        arguments = {"score": score, "message": f"{self.agent_name} on turn {turn}"}
        return [
            {
                "id": f"call-{self.index}-{turn}",
                "type": "function",
                "function": {"name": "respond", "arguments": json.dumps(arguments)},
            }
        ]


class TurnTimer:
    """Stamps the end of every ``GroupChat._post`` call on one chat instance."""

    def __init__(self, chat: Any) -> None:
        """Wrap ``chat._post`` so each post records its sender and a ``perf_counter`` stamp."""
        self.stamps: list[float] = []
        self.speakers: list[str] = []
        original_post = chat._post

        def timed_post(*args: Any, **kwargs: Any) -> Any:
            result = original_post(*args, **kwargs)
            self.stamps.append(time.perf_counter())
            self.speakers.append(kwargs["sender"] if "sender" in kwargs else args[0])
            return result

        chat._post = timed_post

    def turn_ms(self) -> list[float]:
        """Wall time of each turn in ms: the gap between consecutive posts."""
        return [(b - a) * 1000.0 for a, b in itertools.pairwise(self.stamps)]


def run_room(n_agents: int, turns: int, sleep_s: float) -> list[float]:
    """Run one scripted GroupChat room of ``turns`` turns and return per-turn wall times in ms.

    Raises ``RuntimeError`` if the speakers differ from the script, so a silently failing bid
    (GroupChat logs and swallows agent exceptions) can never pass as a fast turn.
    """
    from swarms.structs.groupchat import RESPOND_TOOL, GroupChat

    agents = [ScriptedAgent(i, n_agents, sleep_s, RESPOND_TOOL) for i in range(n_agents)]
    chat = GroupChat(
        name=f"anchor-{n_agents}",
        agents=agents,
        max_loops=turns + 1,
        threshold=THRESHOLD,
        recency_penalty=RECENCY_PENALTY,
        recency_window=RECENCY_WINDOW,
        verbose=False,
        auto_equip=False,
    )
    timer = TurnTimer(chat)
    chat.run(TASK)

    expected = ["User"] + [f"agent-{t % n_agents}" for t in range(1, turns + 1)]
    if timer.speakers != expected:
        raise RuntimeError(
            f"N={n_agents}: speakers diverged from the script after "
            f"{len(timer.speakers) - 1} turns: {timer.speakers[:6]}..."
        )
    if any(agent.calls != turns for agent in agents):
        raise RuntimeError(f"N={n_agents}: not every agent bid on every turn")
    return timer.turn_ms()


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def window_median(turn_ms: list[float], first: int, last: int) -> float:
    """Median wall time of turns ``first..last`` (1-based, inclusive)."""
    return statistics.median(turn_ms[first - 1 : last])


def summarize(n_agents: int, sleep_s: float, turns: int, turn_ms: list[float]) -> dict:
    """Per-configuration result row for the JSON output."""
    return {
        "agents": n_agents,
        "sleep_s": sleep_s,
        "turns": turns,
        "median_ms": round(statistics.median(turn_ms), 3),
        "p95_ms": round(p95(turn_ms), 3),
        "mean_ms": round(statistics.fmean(turn_ms), 3),
        "min_ms": round(min(turn_ms), 3),
        "max_ms": round(max(turn_ms), 3),
        "total_s": round(sum(turn_ms) / 1000.0, 3),
        "turn_ms": [round(v, 3) for v in turn_ms],
    }


def history_growth(n_agents: int, turns: int, sleep_s: float) -> dict:
    """One long room; median turn time in a window around turn 10 and at the last turn."""
    turn_ms = run_room(n_agents, turns, sleep_s)
    early = (5, min(15, turns))
    late = (max(1, turns - 10), turns)
    early_ms = window_median(turn_ms, *early)
    late_ms = window_median(turn_ms, *late)
    return {
        "agents": n_agents,
        "sleep_s": sleep_s,
        "turns": turns,
        "early_window": list(early),
        "early_median_ms": round(early_ms, 3),
        "late_window": list(late),
        "late_median_ms": round(late_ms, 3),
        "late_over_early": round(late_ms / early_ms, 2),
        "total_s": round(sum(turn_ms) / 1000.0, 3),
        "turn_ms": [round(v, 3) for v in turn_ms],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; list options are comma-separated."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="2,4,8,16,32,40", help="room sizes N")
    parser.add_argument("--turns", type=int, default=40, help="turns per room (sleep 0)")
    parser.add_argument(
        "--sleep-turns", type=int, default=None, help="turns per room when sleep > 0 [--turns]"
    )
    parser.add_argument("--sleep", default="0,0.05", help="per-bid sleep in seconds")
    parser.add_argument("--history-turns", type=int, default=1000, help="0 skips the growth run")
    parser.add_argument("--history-agents", type=int, default=16)
    parser.add_argument("--history-sleep", type=float, default=0.0)
    parser.add_argument("--json", dest="json_out", default=None, help="write results here")
    args = parser.parse_args(argv)
    args.agents = [int(x) for x in args.agents.split(",") if x]
    args.sleep = [float(x) for x in args.sleep.split(",") if x]
    if args.sleep_turns is None:
        args.sleep_turns = args.turns
    if min(args.agents) < 2 or args.turns < 1 or args.sleep_turns < 1:
        parser.error("need N >= 2 and at least one turn")
    if 0 < args.history_turns < 15:
        parser.error("--history-turns must be 0 or at least 15")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the grid and the history-growth room, print a table, optionally write JSON."""
    args = parse_args(argv)
    workspace = prepare_environment()
    started = time.perf_counter()
    try:
        run_room(2, 3, 0.0)  # warm lazy imports and code paths once per process
        runs = []
        for sleep_s in args.sleep:
            turns = args.sleep_turns if sleep_s > 0 else args.turns
            for n_agents in args.agents:
                row = summarize(n_agents, sleep_s, turns, run_room(n_agents, turns, sleep_s))
                runs.append(row)
                print(
                    f"N={n_agents:>3} sleep={sleep_s:<5} turns={turns:>4} "
                    f"median={row['median_ms']:>9.3f} ms  p95={row['p95_ms']:>9.3f} ms",
                    flush=True,
                )
        growth = None
        if args.history_turns:
            growth = history_growth(args.history_agents, args.history_turns, args.history_sleep)
            print(
                f"history N={growth['agents']} sleep={growth['sleep_s']} "
                f"turns {growth['early_window']}: {growth['early_median_ms']:.3f} ms, "
                f"turns {growth['late_window']}: {growth['late_median_ms']:.3f} ms "
                f"(x{growth['late_over_early']})",
                flush=True,
            )
    finally:
        if workspace is not None:
            workspace.cleanup()

    result = {
        "benchmark": "swarms_anchor",
        "swarms_version": metadata.version("swarms"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "workload": {
            "high_bid": HIGH_BID,
            "low_bid": LOW_BID,
            "threshold": THRESHOLD,
            "recency_penalty": RECENCY_PENALTY,
            "recency_window": RECENCY_WINDOW,
            "max_loops": "turns + 1",
            "winner_on_turn_t": "agent t mod N",
        },
        "timing_method": (
            "gap between consecutive GroupChat._post calls (instance-wrapped), i.e. one full "
            "loop iteration: _collect_bids + _select_speaker + _post; p95 is nearest-rank"
        ),
        "runs": runs,
        "history_growth": growth,
        "wall_s": round(time.perf_counter() - started, 3),
    }
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")
    print(f"swarms {result['swarms_version']}; total {result['wall_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
