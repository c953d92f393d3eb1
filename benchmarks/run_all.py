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
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import (
    anchor,
    held_rooms,
    intent,
    llm_cost,
    many_rooms,
    report,
    turns,
    worker_calls,
)

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


def cpu() -> str:
    """The machine's cores and CPU model."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                  .splitlines() if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} x {model}"


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    memory_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text()
                     .splitlines() if line.startswith("MemTotal"))
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                   text=True).stdout.split()[2].removeprefix("v=")
    versions = ", ".join(f"{name} {metadata.version(name)}"
                         for name in ("celery", "kombu", "redis", "hiredis", "litellm", "pydantic"))
    return {"CPU": cpu(), "memory": f"{memory_kb / 1024 ** 2:.1f} GiB",
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


def workloads(quick: bool) -> dict[str, Any]:
    """The size of every part; ``quick`` shrinks each to a smoke test."""
    turns = ({"sizes": [2, 4], "turns": 6, "sleeps": [0.0, 0.05], "history_agents": 4,
              "history_turns": 60} if quick else
             {"sizes": [2, 4, 8, 16, 32, 40], "turns": 41, "sleeps": [0.0, 0.05],
              "history_agents": 16, "history_turns": 1000})
    return {"turns": turns, "rooms": 20 if quick else 1000,
            "window_s": 3.0 if quick else 20.0,
            "held": {"rooms": 50, "minutes": 0.1, "gc_every_s": 2.0} if quick else
            {"rooms": TEN_THOUSAND_ROOMS, "minutes": 10.0, "gc_every_s": 60.0},
            "takeover_rooms": 40 if quick else 1000}


def part_runners(quick: bool) -> dict[str, Callable[[], Any]]:
    """Each part of the suite by name, in the order a whole run takes them."""
    work = workloads(quick)

    def many() -> list[dict]:
        return [many_rooms.run(work["rooms"], coordinators, 2, 128, 5.0, work["window_s"], env)
                for coordinators, env in MANY_ROOMS_CONFIGURATIONS]

    def held() -> dict:
        try:
            return held_rooms.run(**work["held"])
        except TimeoutError as error:  # reported as missed, with what did not happen
            return {"rooms": work["held"]["rooms"], "minutes": work["held"]["minutes"],
                    "error": str(error)}

    return {
        "anchor": lambda: anchor.run(**work["turns"]),
        "turns": lambda: turns.run(**work["turns"]),
        "many_rooms": many,
        "ten_thousand_rooms": held,
        "llm_cost": lambda: llm_cost.run(20 if quick else 200),
        "worker_calls": lambda: worker_calls.run(20 if quick else 200, 50 if quick else 2000),
        "intent": lambda: intent.run([4, 8] if quick else [4, 8, 16], 3 if quick else 6),
        "takeover": takeover,
        "takeover_at_scale": lambda: takeover_at_scale(work["takeover_rooms"]),
    }


PARTS = tuple(part_runners(True))


def takeover_at_scale(rooms: int) -> dict[str, Any]:
    """kill -9 of a coordinator holding ``rooms`` active rooms, a standby running."""
    from benchmarks import takeover as bench

    try:
        return bench.run_at_scale(rooms, None, seed=1)
    except TimeoutError as error:
        return {"rooms": rooms, "error": str(error)}


def run_all(quick: bool, only: list[str] | None = None) -> dict[str, Any]:
    """The parts named in ``only`` (every part when None), in the suite's order."""
    results: dict[str, Any] = {}
    for name, runner in part_runners(quick).items():
        if only is None or name in only:
            print(name.replace("_", " "), flush=True)
            results[name] = runner()
    if "turns" in results:
        results["redis_options"] = results["turns"]["redis_options"]
    return results


def parts(text: str) -> list[str]:
    """``--only``'s comma-separated names, each checked against the suite's parts."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown part {', '.join(unknown) or '(none given)'}: choose from {', '.join(PARTS)}")
    return names


def now() -> str:
    """The time a run ends, as RESULTS.md gives it."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def main(argv: list[str] | None = None) -> None:
    """Run everything and write the results next to this file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny workloads, a smoke test")
    parser.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md goes")
    parser.add_argument("--only", type=parts, metavar="NAME[,NAME]",
                        help="run only these parts and merge them into the results.json "
                        "already in --out: " + ", ".join(PARTS))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    before = quietness()
    results = run_all(args.quick, args.only)
    command = ("python -m benchmarks.run_all" + " --quick" * args.quick
               + (f" --only {','.join(args.only)}" if args.only else "")
               if args.quick or args.only else "make bench")
    run = {"command": command, "date": now(), "quiet": {"before": before, "after": quietness()},
           "wall_s": time.perf_counter() - started}
    previous = args.out / "results.json"
    if args.only and previous.exists():
        # A partial run refreshes only its parts; the rest, and the header, stay the
        # whole run's, and each refreshed part names the run that measured it.
        results = {**json.loads(previous.read_text()), **results}
        # Machines differ in pace: a part measured on another than the header's says so.
        run["cpu"] = cpu()
        results.setdefault("parts", {}).update({name: run for name in args.only})
    else:
        results.update(run, machine=machine(), parts={})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "RESULTS.md").write_text(report.render(results))
    print(f"wrote {args.out / 'RESULTS.md'} in {run['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
