"""Starting and stopping parley's own processes (the demo and the tests use these).

Every process is stopped through its own PID: SIGTERM first, SIGKILL if it lingers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], log_path: Path, env: dict[str, str] | None = None
          ) -> subprocess.Popen[bytes]:
    """Start ``args`` with stdout and stderr going to ``log_path``."""
    log_file = log_path.open("ab")
    try:
        return subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    finally:
        log_file.close()


def stop(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> int | None:
    """Stop the process by its PID: SIGTERM, then SIGKILL after ``grace_s``."""
    stop_together([process], grace_s)
    return process.returncode


def stop_together(processes: list[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    """Stop the processes by their PIDs: SIGTERM to all, in order, then SIGKILL to any still
    running ``grace_s`` later. They shut down side by side: a group's stop takes as long as
    its slowest process, not the sum of them."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait()


def parley_command(*args: str) -> list[str]:
    """The command line running ``parley <args>`` with this interpreter."""
    return [sys.executable, "-m", "parley", *args]


def start_coordinator(log_path: Path, env: dict[str, str] | None = None,
                      *extra: str) -> subprocess.Popen[bytes]:
    """Start ``parley coordinator`` as its own process."""
    return start(parley_command("coordinator", *extra), log_path, env)


def start_worker(log_path: Path, env: dict[str, str] | None = None,
                 *extra: str) -> subprocess.Popen[bytes]:
    """Start ``parley worker`` as its own process."""
    return start(parley_command("worker", *extra), log_path, env)


def start_api(log_path: Path, env: dict[str, str] | None = None,
              *extra: str) -> subprocess.Popen[bytes]:
    """Start ``parley api`` as its own process."""
    return start(parley_command("api", *extra), log_path, env)


def start_redis(port: int, directory: Path, *options: str) -> subprocess.Popen[bytes]:
    """Start a private redis-server on ``port``, keeping its files in ``directory``;
    waits until it answers. Raises FileNotFoundError when redis-server is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise FileNotFoundError("redis-server")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--save", "", "--appendonly", "no", *options]
    process = start(args, directory / "redis.log")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return process
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited: see {directory / 'redis.log'}")
        time.sleep(0.05)
    stop(process)
    raise RuntimeError(f"redis-server did not answer on port {port}")


class ProcessGroup:
    """Coordinators, workers and APIs started together and all stopped together, by PID.

    Use as a context manager so that they are stopped even when the caller fails.
    """

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_all()

    def _track(self, kind: str, starter, *extra: str,  # noqa: ANN001
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log_path = self.directory / f"{kind}-{len(self.processes)}.log"
        process = starter(log_path, {**self.env, **(env or {})}, *extra)
        self.processes.append(process)
        self.logs[process.pid] = log_path
        return process

    def coordinator(self, *extra: str, env: dict[str, str] | None = None
                    ) -> subprocess.Popen[bytes]:
        """Start one more coordinator."""
        return self._track("coordinator", start_coordinator, *extra, env=env)

    def worker(self, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start one more worker."""
        return self._track("worker", start_worker, *extra, env=env)

    def api(self, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start the HTTP API (``parley api``)."""
        return self._track("api", start_api, *extra, env=env)

    def kill(self, process: subprocess.Popen[bytes], signum: int = signal.SIGKILL) -> None:
        """Send ``signum`` to one process (by PID) and reap it if it was a kill."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)
        if signum == signal.SIGKILL:
            process.wait()

    def stop_all(self) -> None:
        """Stop every process still running, all at once (SIGTERM newest first)."""
        stop_together(list(reversed(self.processes)))

    def log_tail(self, lines: int = 40) -> str:
        """The end of every process's log, for a failing test's report."""
        parts = []
        for pid, path in self.logs.items():
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            parts.append(f"--- {path.name} (pid {pid})\n" + "\n".join(text))
        return "\n".join(parts)
