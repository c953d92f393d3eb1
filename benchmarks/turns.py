"""Per-turn orchestration overhead, history growth and the one-wave check, on one
coordinator and one worker as separate processes against a private redis-server.

    .venv/bin/python -m benchmarks.turns --agents 2,4 --turns 10 --history-turns 0

Every room uses the rotating workload (agent t mod N bids 0.9, the rest 0.2, all with a
message) with scripted agents: no LLM client runs, so what is timed is the orchestration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness import (
    Deployment,
    RoomRun,
    children,
    cpu_s,
    expect_rotation,
    p95,
    rotating_spec,
    run_room,
    summary,
    window_median,
)
from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.settings import Settings

# The worker pool of this suite: threads, as many as a turn of the biggest room needs.
WORKER_CONCURRENCY = 64
# The biggest sleeping room again, with fewer and larger tasks per turn.
WAVE_VARIANTS = [{"PARLEY_AGENTS_PER_TASK": "8"}]


def grid(deployment: Deployment, sizes: list[int], turns: int, sleep_s: float) -> list[dict]:
    """One room per size N: the median and p95 of its turns, the CPU each process spent
    per turn, and (for sleeping agents) whether the calls ran in one wave."""
    client = deployment.client()
    pids = process_ids(deployment)
    rows = []
    for agents in sizes:
        before = {name: cpu_s(pid) for name, pid in pids.items()}
        run = run_room(client, rotating_spec(agents, turns, sleep_s))
        cpu = {f"{name}_cpu_ms": round((cpu_s(pid) - before[name]) / turns * 1000, 3)
               for name, pid in pids.items()}
        expect_rotation(run, agents, turns)
        rows.append({"agents": agents, "sleep_s": sleep_s, **summary(run.turn_ms), **cpu,
                     **(waves(deployment, run, sleep_s) | added_latency(client, run) if sleep_s
                        else spans(client, run))})
        print(f"parley N={agents:>3} sleep={sleep_s:<5} median={rows[-1]['median_ms']:8.2f} ms "
              f"p95={rows[-1]['p95_ms']:8.2f} ms", flush=True)
    return rows


def process_ids(deployment: Deployment) -> dict[str, int]:
    """The PIDs whose CPU a turn is charged to: the coordinator's lease keeper too."""
    worker, coordinator = deployment.group.processes[:2]
    keepers = children(coordinator.pid)
    return {"coordinator": coordinator.pid, **({"keeper": keepers[0]} if keepers else {}),
            "worker": worker.pid, "redis": deployment.redis_process.pid}


def spans(client: Client, run: RoomRun) -> dict[str, float]:
    """Median time from one turn's decision to the next turn's opening (commit, drain and
    open), and from a turn's opening to its decision (fan-out, workers, collection)."""
    records = client.turns(run.room)
    pairs = list(zip(records, records[1:], strict=False))
    return {"decided_to_opened_ms": round(statistics.median(
                (b.opened_at - a.decided_at) * 1000 for a, b in pairs), 3),
            "opened_to_decided_ms": round(statistics.median(
                (b.decided_at - b.opened_at) * 1000 for _, b in pairs), 3)}


def added_latency(client: Client, run: RoomRun) -> dict[str, float]:
    """What a turn took beyond its slowest call, from the turn records: the time from the
    previous turn's decision to this one's, less the longest call latency a worker
    recorded in this turn (turn 1 left out, as everywhere)."""
    records = client.turns(run.room)
    added = [(b.decided_at - a.decided_at) * 1000 - max(bid.latency_ms for bid in b.bids)
             for a, b in zip(records, records[1:], strict=False) if b.bids]
    return {"added_median_ms": round(statistics.median(added), 2),
            "added_p95_ms": round(p95(added), 2)}


def history(deployment: Deployment, agents: int, turns: int) -> dict:
    """One long room: turn time around turn 10 and at the last turns."""
    run = run_room(deployment.client(), rotating_spec(agents, turns), timeout_s=900)
    expect_rotation(run, agents, turns)
    return growth(run.turn_ms, agents, turns)


def growth(turn_ms: list[float], agents: int, turns: int) -> dict:
    """Median of turns 5-25 against the median of the last 21 turns (both sides): windows
    wide enough that a moment of load elsewhere on the machine does not decide them."""
    early = (5, 25)
    late = (turns - 20, turns)
    if late[0] <= early[1]:
        raise ValueError(f"a history room needs more than {2 * early[1]} turns, not {turns}")
    early_ms = window_median(turn_ms, *early)
    late_ms = window_median(turn_ms, *late)
    return {"agents": agents, "turns": turns, "early_window": list(early),
            "early_median_ms": round(early_ms, 3), "late_window": list(late),
            "late_median_ms": round(late_ms, 3), "late_over_early": round(late_ms / early_ms, 2)}


def waves(deployment: Deployment, run: RoomRun, sleep_s: float) -> dict:
    """How the bids of each turn of ``run`` spread after the turn opened: with every call
    in flight at once (one wave) the last bid lands about one sleep after the opening, with
    two waves after two sleeps."""
    client = deployment.client()
    redis = deployment.redis()
    written: dict[int, list[float]] = {}
    for entry_id, fields in redis.xrange(Keys(deployment.prefix).bids(run.room)):
        millis = int(entry_id.split(b"-")[0])
        written.setdefault(int(fields[b"turn"]), []).append(millis / 1000)
    last_bid_ms = [(max(written[record.turn]) - record.opened_at) * 1000
                   for record in client.turns(run.room)[1:] if record.turn in written]
    typical = statistics.median(last_bid_ms)
    return {"open_to_last_bid_median_ms": round(typical, 2),
            "open_to_last_bid_max_ms": round(max(last_bid_ms), 2),
            "one_wave": typical < 2 * sleep_s * 1000}


def wave_variant(env: dict[str, str], agents: int, turns: int, sleep_s: float) -> dict:
    """One sleeping room on a deployment started with ``env``."""
    with Deployment(env=env) as deployment:
        start(deployment)
        (row,) = grid(deployment, [agents], turns, sleep_s)
    return {**row, "settings": env}


def worker_settings() -> dict[str, Any]:
    """The worker settings behind the one-wave result, as an operator would set them."""
    from parley.workers.app import app

    agents_per_task = Settings().agents_per_task
    return {"pool": "threads", "PARLEY_WORKER_CONCURRENCY": WORKER_CONCURRENCY,
            "PARLEY_AGENTS_PER_TASK": agents_per_task,
            "worker_prefetch_multiplier": app.conf.worker_prefetch_multiplier,
            "call threads in flight at most": WORKER_CONCURRENCY * agents_per_task}


def start(deployment: Deployment) -> None:
    """One worker and one coordinator, warmed with a small room."""
    deployment.group.worker("-Q", "parley.agents",
                            env={"PARLEY_WORKER_CONCURRENCY": str(WORKER_CONCURRENCY)})
    deployment.group.coordinator()
    run_room(deployment.client(), rotating_spec(2, 3), timeout_s=120)


def run(sizes: list[int], turns: int, sleeps: list[float], history_agents: int,
        history_turns: int) -> dict[str, Any]:
    """The whole turn suite on one fresh deployment."""
    with Deployment() as deployment:
        start(deployment)
        result: dict[str, Any] = {"runs": [row for sleep_s in sleeps
                                           for row in grid(deployment, sizes, turns, sleep_s)]}
        if any(sleeps):
            result["wave_variants"] = [wave_variant(env, max(sizes), turns, max(sleeps))
                                       for env in WAVE_VARIANTS]
        if history_turns:
            started = time.perf_counter()
            result["history"] = history(deployment, history_agents, history_turns)
            result["history"]["wall_s"] = round(time.perf_counter() - started, 1)
            print(f"history: {result['history']}", flush=True)
        result["redis_options"] = " ".join(deployment.redis_options)
        result["worker_settings"] = worker_settings()
        result["anatomy"] = [row for row in result["runs"] if not row["sleep_s"]]
    return result


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    """The workload options this suite and the swarms anchor share."""
    parser.add_argument("--agents", default="2,4,8,16,32,40", help="room sizes N")
    parser.add_argument("--turns", type=int, default=41, help="turns per room; turn 1 is "
                        "left out of the statistics")
    parser.add_argument("--sleep", default="0,0.05", help="seconds each call sleeps")
    parser.add_argument("--history-agents", type=int, default=16)
    parser.add_argument("--history-turns", type=int, default=1000, help="0 skips it")


def workload(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed workload options, as keyword arguments of both suites' ``run``."""
    return {"sizes": [int(n) for n in args.agents.split(",")], "turns": args.turns,
            "sleeps": [float(s) for s in args.sleep.split(",")],
            "history_agents": args.history_agents, "history_turns": args.history_turns}


def run_command_line(suite: Callable[..., dict], description: str,
                     argv: list[str] | None) -> None:
    """Parse the workload options, run ``suite`` on them and print its results as JSON."""
    parser = argparse.ArgumentParser(description=description)
    add_workload_options(parser)
    print(json.dumps(suite(**workload(parser.parse_args(argv))), indent=1))


def main(argv: list[str] | None = None) -> None:
    """Run the suite from the command line and print its JSON."""
    run_command_line(run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
