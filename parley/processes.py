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
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


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
