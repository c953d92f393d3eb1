"""``parley demo``: the whole system on one machine, started and stopped by one command."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import redis
from rich.console import Console

from parley import output, processes
from parley.client import Client
from shared.models import RoomSpec
from shared.settings import Settings, get_settings, redact_url

# Package data, so `parley demo` runs from an installed wheel in any directory
# (examples/rooms/demo.yaml links here).
DEMO_SPEC = Path(__file__).parent / "rooms" / "demo.yaml"


def reachable(url: str) -> bool:
    """True when a Redis server answers at ``url``."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def run_demo(spec: RoomSpec, task: str, console: Console) -> None:
    """Run ``task`` in a room of ``spec`` with a real worker and coordinator process."""
    settings = get_settings()
    workdir = Path(tempfile.mkdtemp(prefix="parley-demo-"))
    started = []
    try:
        redis_url = settings.redis_url
        if not reachable(redis_url):
            port = processes.free_port()
            try:
                started.append(processes.start_redis(port, workdir))
            except FileNotFoundError:
                raise ValueError(
                    f"Redis does not answer at {redact_url(redis_url)} and redis-server is "
                    "not installed: install it (apt-get install redis-server) or set "
                    "PARLEY_REDIS_URL"
                ) from None
            redis_url = f"redis://127.0.0.1:{port}/0"
            console.print(f"[dim]started a private redis-server on port {port}[/dim]")
        env = {"PARLEY_REDIS_URL": redis_url, "PARLEY_BROKER_URL": "",
               "PARLEY_WORKER_PRELOAD_LITELLM": "false", "PARLEY_LOG_FORMAT": "json"}
        started.append(processes.start_worker(workdir / "worker.log", env, "-c", "16"))
        started.append(processes.start_coordinator(workdir / "coordinator.log", env))
        console.print(f"[dim]worker pid {started[-2].pid}, coordinator pid {started[-1].pid}, "
                      f"logs in {workdir}[/dim]")
        client = Client(Settings(**{**settings.model_dump(), "redis_url": redis_url,
                                    "broker_url": redis_url}))
        result = client.run(spec, task, timeout_s=120,
                            on_message=lambda message: output.print_message(console, message))
        output.print_run(console, result, printed=True)
    finally:
        for process in reversed(started):
            with contextlib.suppress(Exception):
                processes.stop(process)
        console.print(f"[dim]stopped {len(started)} process(es): "
                      f"{', '.join(str(p.pid) for p in started)}[/dim]")
