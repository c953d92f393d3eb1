"""``parley demo``: the whole system on one machine, started and stopped by one command."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Annotated

import redis
import typer
from rich.console import Console
from rich.markup import escape

from parley import processes
from parley.cli import common
from parley.cli.errors import friendly
from parley.client.client import Client
from parley.shared.models import SEED_SENDER, MentionPolicy, RoomSpec
from parley.shared.settings import Settings, get_settings, redact_url
from parley.views import explain
from parley.views.run_printer import RunPrinter
from parley.views.terminal_text import terminal_text

# The dashboard is looked for this long: a demo never waits on one that is not there.
DASHBOARD_PROBE_S = 0.3
# Where ``parley api`` listens unless its settings say otherwise.
DEFAULT_API_HOST, DEFAULT_API_PORT = "127.0.0.1", 8700
# How long the demo's worker may take to start and publish its tools, and how often it is
# looked for meanwhile.
WORKER_OFFER_S, OFFER_POLL_S = 60.0, 0.1
app = typer.Typer()
# Package data, so `parley demo` runs from an installed wheel in any directory
# (examples/rooms/demo.yaml links here).
DEMO_SPEC = Path(__file__).parents[1] / "rooms" / "demo.yaml"


def reachable(url: str) -> bool:
    """True when a Redis server answers at ``url``."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def dashboard_url(settings: Settings, timeout_s: float = DASHBOARD_PROBE_S) -> str | None:
    """The dashboard's address when a ``parley api`` answers its health check there
    (``api_host``/``api_port`` from the settings, else 127.0.0.1:8700), else None."""
    host = getattr(settings, "api_host", DEFAULT_API_HOST)
    if host in ("0.0.0.0", "::", ""):  # listening everywhere: ask it locally
        host = DEFAULT_API_HOST
    base = f"http://{host}:{getattr(settings, 'api_port', DEFAULT_API_PORT)}"
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=timeout_s) as reply:  # noqa: S310
            return f"{base}/" if reply.status == 200 else None
    except (OSError, ValueError):
        return None


def shared_redis_line(url: str) -> str:
    """The demo's Redis when one answers at the settings' URL: its rooms stay there."""
    return f"using Redis at {redact_url(url)} (PARLEY_REDIS_URL)"


def private_redis_line(url: str, port: int) -> str:
    """The demo's Redis when none answers at the settings' URL: its own, gone at the end."""
    return (f"no Redis answers at {redact_url(url)} (PARLEY_REDIS_URL): started a private "
            f"redis-server on 127.0.0.1:{port}, stopped at the end")


def task_sender(spec: RoomSpec) -> str:
    """Who posts the demo's task: the default poster, or the room's first person where its
    roster of people leaves the default out (a discussion room with ``people``)."""
    people = spec.policy.people if isinstance(spec.policy, MentionPolicy) else None
    return people[0] if people and SEED_SENDER not in people else SEED_SENDER


def wait_for_offer(client: Client, worker: subprocess.Popen[bytes], log_path: Path) -> None:
    """Wait until the demo's worker has published what it offers: a room naming tools is
    refused until a live worker offers them (the worker's PARLEY_WORKER_TOOLS and
    PARLEY_WORKER_MCP_CONFIG say which)."""
    deadline = time.monotonic() + WORKER_OFFER_S
    # Other workers on a shared Redis may be live already: this one's id ends in its pid.
    while not any(name.endswith(f"-{worker.pid}") for name in client.tool_workers()):
        if worker.poll() is not None:
            lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
            raise ValueError(f"the demo's worker stopped (exit code {worker.returncode}): "
                             f"{lines[-1] if lines else 'it wrote nothing'}")
        if time.monotonic() > deadline:
            raise ValueError(f"the demo's worker offered nothing within {WORKER_OFFER_S:g}s")
        time.sleep(OFFER_POLL_S)


def run_demo(spec: RoomSpec, task: str, console: Console, settings: Settings,
             keep_logs: bool = False) -> None:
    """Run ``task`` in a room of ``spec`` with a real worker and coordinator process, on
    the Redis of ``settings`` (or a private one when none answers there); the processes'
    logs are removed at the end unless ``keep_logs``."""
    workdir = Path(tempfile.mkdtemp(prefix="parley-demo-"))
    started = []
    private_redis = False
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
            console.print(f"[dim]{escape(private_redis_line(redis_url, port))}[/dim]",
                          highlight=False)
            redis_url, private_redis = f"redis://127.0.0.1:{port}/0", True
        else:
            console.print(f"[dim]{escape(shared_redis_line(redis_url))}[/dim]", highlight=False)
        env = {"PARLEY_REDIS_URL": redis_url, "PARLEY_BROKER_URL": "",
               "PARLEY_WORKER_PRELOAD_LITELLM": "false", "PARLEY_LOG_FORMAT": "json"}
        started.append(processes.start_worker(workdir / "worker.log", env, "-c", "16"))
        started.append(processes.start_coordinator(workdir / "coordinator.log", env))
        console.print(f"[dim]worker pid {started[-2].pid}, coordinator pid {started[-1].pid}"
                      "[/dim]")
        client = Client(Settings(**{**settings.model_dump(), "redis_url": redis_url,
                                    "broker_url": redis_url}))
        if any(agent.tools for agent in spec.callers):
            wait_for_offer(client, started[-2], workdir / "worker.log")
        room = client.create_room(spec)
        console.print(f"[dim]{escape(terminal_text(explain.legend(spec)))}[/dim]",
                      highlight=False)
        # A private Redis goes with the demo, and its rooms with it: no "next" to offer.
        printer = RunPrinter(console, client.store, room, spec, hints=not private_redis)
        result = client.wait(room, client.post(room, task, task_sender(spec)), timeout_s=120,
                             on_message=printer.message)
        printer.finish(result)
        # A dashboard reads the configured Redis: a private one's rooms are not in it.
        dashboard = None if private_redis else dashboard_url(settings)
        if dashboard:
            console.print(f"dashboard: {dashboard} (room {room})", highlight=False)
    finally:
        for process in reversed(started):
            with contextlib.suppress(Exception):
                processes.stop(process)
        console.print(f"[dim]stopped {len(started)} process(es): "
                      f"{', '.join(str(p.pid) for p in started)}[/dim]")
        if keep_logs:
            console.print(f"logs kept in {workdir}", highlight=False)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@app.command()
@friendly
def demo(
    spec: Annotated[Path | None, typer.Option(
        help="Room spec (default: the scripted launch panel parley ships, offline)")] = None,
    task: Annotated[str, typer.Option(help="The task")] = "Should we launch the beta next week?",
    keep_logs: Annotated[bool, typer.Option("--keep-logs", help="Keep the processes' logs "
                                            "(their folder is named at the end)")] = False,
) -> None:
    """Start a worker and a coordinator, run a scripted room, print it with each turn's
    bids, stop them and remove their logs."""
    run_demo(common.read_spec(spec or DEMO_SPEC), task, common.console, get_settings(),
             keep_logs)
