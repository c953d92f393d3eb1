"""Where the CPU goes: py-spy on a coordinator serving many rooms, or on a worker serving
one N=4 room of instant agents, summed by function.

    .venv/bin/python -m benchmarks.profiles coordinator --rooms 1000 --seconds 20
    .venv/bin/python -m benchmarks.profiles worker --seconds 15   # N=4, instant agents

py-spy (`.venv/bin/py-spy`, the dev extra; attaching needs root or ptrace rights) samples
the process ``--rate`` times a second without stopping it (``--nonblocking``); idle
threads are left out, so a share is of the samples where the process was running Python.
"Self" counts a function where it was the innermost frame, "total" wherever it was on
the stack (once per sample).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness import Deployment, rotating_spec, run_room
from benchmarks.many_rooms import wait_until
from parley.shared.keys import Keys

TOP = 12
# The worker's rooms are the turn benchmark's (41 turns each), one after another: a
# scripted agent finds its entry by grouping its whole script, so one long room would
# profile that instead of a turn.
WORKER_ROOM_TURNS = 41


def py_spy() -> str:
    """The py-spy beside this interpreter, or on the PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed: pip install py-spy (the dev extra)")
    return found


def record(pid: int, seconds: float, rate: int) -> list[tuple[list[str], int]]:
    """py-spy's samples of ``pid``: each stack (outermost first) with its count."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "profile.txt"
        subprocess.run([py_spy(), "record", "--pid", str(pid), "--duration", str(int(seconds)),
                        "--rate", str(rate), "--nonblocking", "--format", "raw",
                        "--output", str(out)], check=True, capture_output=True, timeout=seconds + 60)
        stacks = []
        for line in out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack:
                stacks.append((stack.split(";"), int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]]) -> dict[str, Any]:
    """Shares of the samples: by thread, by the package running (the innermost frame's),
    by innermost function, and parley's own functions wherever on the stack."""
    threads: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    own: Counter[str] = Counter()
    parley: Counter[str] = Counter()
    for frames, count in stacks:
        threads[thread_of(frames)] += count
        packages[package(frames[-1])] += count
        own[short(frames[-1])] += count
        for name in {short(frame) for frame in frames if is_parley(frame)}:
            parley[name] += count
    samples = sum(count for _, count in stacks)

    def top(counter: Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * n / samples, 1)] for name, n in counter.most_common(TOP)]

    return {"samples": samples, "threads": top(threads), "packages": top(packages),
            "self": top(own), "parley_total": top(parley)}


def where(frame: str) -> str:
    """The file of a py-spy frame, ``function (path:line)``."""
    return frame.partition(" (")[2].rstrip(")").rsplit(":", 1)[0]


def is_parley(frame: str) -> bool:
    """Whether the frame is parley's own code (not a library's, not the CLI's entry)."""
    path = where(frame)
    return any(f"/{part}/" in path for part in ("coordinator", "workers", "shared")) \
        and "site-packages" not in path


def package(frame: str) -> str:
    """What the frame belongs to: parley's package, or the library or standard module's
    top package (py-spy names those relative to the directory they were found in)."""
    path = where(frame)
    if is_parley(frame):
        return "parley/" + Path(path).parent.name
    parts = Path(path.split("site-packages/", 1)[-1]).parts
    return parts[0].removesuffix(".py") if parts and not path.startswith("/") else path


def thread_of(frames: list[str]) -> str:
    """The thread a stack ran on: the function a Thread ran, or the main thread."""
    for outer, inner in zip(frames, frames[1:], strict=False):
        if outer.startswith("Thread.run ") or outer.startswith("run (threading"):
            return short(inner)
    return "main thread"


def short(frame: str) -> str:
    """``function (path/to/module.py:line)`` as ``function (package/module.py)``."""
    name = frame.partition(" (")[0]
    parts = Path(where(frame)).parts
    return f"{name} ({'/'.join(parts[-2:])})" if parts else name


def coordinator(rooms: int, seconds: float, rate: int) -> dict[str, Any]:
    """A coordinator serving ``rooms`` rooms of 4 agents sleeping 200 ms, two workers."""
    with Deployment(env={"PARLEY_COORDINATOR_CAPACITY": str(rooms)}) as deployment:
        client, redis, keys = deployment.client(), deployment.redis(), Keys(deployment.prefix)
        process = deployment.group.coordinator()
        ids = [client.create_room(rotating_spec(4, 200, 0.2)) for _ in range(rooms)]
        for room in ids:
            client.post(room, "go")
        for _ in range(2):
            deployment.group.worker("-Q", "parley.agents", env={"PARLEY_WORKER_CONCURRENCY": "128"})
        wait_until(lambda: sum(1 for o in redis.mget([keys.lease(r) for r in ids]) if o) == rooms,
                   120 + rooms / 20, f"{rooms} rooms leased")
        wait_until(lambda: redis.xlen(keys.log(ids[-1])) > 2, 120, "the rooms' turns")
        return {"process": f"coordinator, {rooms} rooms", **summarise(record(process.pid,
                                                                              seconds, rate))}


def worker(seconds: float, rate: int) -> dict[str, Any]:
    """A worker serving N=4 rooms of instant agents, one after another."""
    with Deployment() as deployment:
        process = deployment.group.worker("-Q", "parley.agents")
        deployment.group.coordinator()
        client = deployment.client()
        run_room(client, rotating_spec(2, 3), timeout_s=120)  # warm
        done = threading.Event()

        def rooms() -> None:
            while not done.is_set():
                run_room(client, rotating_spec(4, WORKER_ROOM_TURNS), timeout_s=120)

        room = threading.Thread(target=rooms, daemon=True)
        room.start()
        try:
            return {"process": "worker, N=4 rooms of instant agents, one after another",
                    **summarise(record(process.pid, seconds, rate))}
        finally:
            done.set()
            room.join(timeout=150)  # the room running ends before its Redis does


def main(argv: list[str] | None = None) -> None:
    """Profile one process and print its top functions as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("process", choices=("coordinator", "worker"))
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=100)
    args = parser.parse_args(argv)
    result = (coordinator(args.rooms, args.seconds, args.rate) if args.process == "coordinator"
              else worker(args.seconds, args.rate))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
