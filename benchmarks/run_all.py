"""Run every benchmark and write benchmarks/RESULTS.md (and results.json beside it).

    make bench          # or: .venv/bin/python -m benchmarks.run_all

Each benchmark starts its own redis-server and parley processes and stops them by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import anchor, intent, llm_cost, many_rooms, report, turns, worker_calls

HERE = Path(__file__).parent
TAKEOVER_TIMEOUT_S = 300
# One coordinator, then two sharing the same rooms.
MANY_ROOMS_CONFIGURATIONS = [(1, None), (2, None)]
# One coordinator holding every room of a big deployment: its memory is what is measured.
TEN_THOUSAND_ROOMS = 10_000


def quietness() -> dict[str, Any]:
    """The load average and how many other test runs are going on right now."""
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    pytest_runs = sum(1 for line in processes.splitlines() if "pytest" in line)
    return {"load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "pytest": pytest_runs}


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                  .splitlines() if line.startswith("model name")), platform.processor())
    memory_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text()
                     .splitlines() if line.startswith("MemTotal"))
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                   text=True).stdout.split()[2].removeprefix("v=")
    versions = ", ".join(f"{name} {metadata.version(name)}"
                         for name in ("celery", "kombu", "redis", "hiredis", "litellm", "pydantic"))
    return {"CPU": f"{os.cpu_count()} x {model}", "memory": f"{memory_kb / 1024 ** 2:.1f} GiB",
            "OS": platform.platform(), "Python": platform.python_version(),
            "Redis server": redis_version, "libraries": versions}


def takeover() -> str | None:
    """The failover benchmark's report, when benchmarks/takeover.py exists."""
    if not (HERE / "takeover.py").exists():
        return None
    done = subprocess.run([sys.executable, "-m", "benchmarks.takeover"], capture_output=True,
                          text=True, timeout=TAKEOVER_TIMEOUT_S)
    return done.stdout + (f"\n(exit code {done.returncode})\n{done.stderr[-2000:]}"
                          if done.returncode else "")


def run_all(quick: bool) -> dict[str, Any]:
    """Every benchmark, in a fixed order; ``quick`` shrinks each workload to a smoke test."""
    workload = ({"sizes": [2, 4], "turns": 6, "sleeps": [0.0, 0.05], "history_agents": 4,
                 "history_turns": 60} if quick else
                {"sizes": [2, 4, 8, 16, 32, 40], "turns": 41, "sleeps": [0.0, 0.05],
                 "history_agents": 16, "history_turns": 1000})
    rooms = 20 if quick else 1000
    window_s = 3.0 if quick else 20.0
    results: dict[str, Any] = {}
    print("swarms anchor", flush=True)
    results["anchor"] = anchor.run(**workload)
    print("parley turns", flush=True)
    results["turns"] = turns.run(**workload)
    results["redis_options"] = results["turns"]["redis_options"]
    print("many rooms", flush=True)
    results["many_rooms"] = [many_rooms.run(rooms, coordinators, 2, 128, 5.0, window_s, env)
                             for coordinators, env in MANY_ROOMS_CONFIGURATIONS]
    held = 50 if quick else TEN_THOUSAND_ROOMS
    print(f"{held:,} rooms on one coordinator", flush=True)
    try:
        results["ten_thousand_rooms"] = many_rooms.run(
            held, 1, 2, 128, 5.0, window_s / 2, {"PARLEY_COORDINATOR_CAPACITY": str(held)},
            workers_first=True)
    except TimeoutError as error:  # reported as missed, with what did not happen
        results["ten_thousand_rooms"] = {"rooms": held, "error": str(error)}
    print("LLM client cost", flush=True)
    results["llm_cost"] = llm_cost.run(20 if quick else 200)
    print("one worker holding many calls", flush=True)
    results["worker_calls"] = worker_calls.run(20 if quick else 200, 50 if quick else 2000)
    print("intent bidding and streaming", flush=True)
    results["intent"] = intent.run([4, 8] if quick else [4, 8, 16], 3 if quick else 6)
    print("takeover", flush=True)
    results["takeover"] = takeover()
    return results


def main(argv: list[str] | None = None) -> None:
    """Run everything and write the results next to this file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny workloads, a smoke test")
    parser.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md goes")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    before = quietness()
    results = run_all(args.quick)
    results.update(
        command="make bench" if not args.quick else "python -m benchmarks.run_all --quick",
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), machine=machine(),
        quiet={"before": before, "after": quietness()},
        wall_s=time.perf_counter() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "RESULTS.md").write_text(report.render(results))
    print(f"wrote {args.out / 'RESULTS.md'} in {results['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
