"""The long-running processes and their probe: ``parley coordinator``, ``worker``, ``api``
and ``health``. Each reads its settings once at start-up; a setting that cannot work is one
line and exit 2 before anything connects."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

import click
import structlog
import typer
from pydantic import ValidationError

from parley.cli.errors import EXIT_BAD_INPUT, settings_that_work
from parley.shared import tracing
from parley.shared.connections import redis_kwargs
from parley.shared.logs import configure_logging, resolve_format
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.settings import get_settings, redact_url
from parley.views.problems import describe_invalid

app = typer.Typer()

HealthPort = Annotated[int | None, typer.Option(
    "--health-port", help="Serve /livez, /readyz and /metrics on this port (0: off; "
    "default PARLEY_HEALTH_PORT, else 8701 for a coordinator, 8702 for a worker)")]


@app.command()
def coordinator(
    coordinator_id: Annotated[str, typer.Option("--id", help="Coordinator id")] = "",
    capacity: Annotated[int | None, typer.Option(help="Most rooms served at once")] = None,
    health_port: HealthPort = None,
) -> None:
    """Serve rooms: lease runnable rooms and run their turns (until SIGTERM)."""
    # The coordinator's code (Celery's client among it) loads only for this command.
    from parley.coordinator.service import serve_forever
    from parley.coordinator.transport import CeleryTransport
    from parley.shared.health import HealthPortError

    with settings_that_work():
        settings = get_settings()
        if capacity is not None:
            settings = settings.model_copy(update={"coordinator_capacity": capacity})
        redis_kwargs(settings)  # checks the TLS settings before anything connects
        transport = CeleryTransport(settings.broker_url, timeout_s=settings.lease_renew_every_s,
                                    settings=settings)
    configure_logging(settings.log_format, settings.log_level)
    tracing.setup("coordinator", settings)
    try:
        asyncio.run(serve_forever(settings, transport, coordinator_id, health_port))
    except HealthPortError as error:
        print(f"parley: {error}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(
    ctx: typer.Context,
    queues: Annotated[str, typer.Option("--queues", "-Q", help="Comma-separated queues")] = DEFAULT_QUEUE,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c")] = None,
    pool: Annotated[str | None, typer.Option("--pool", "-P", help="threads, gevent, prefork")] = None,
    hostname: Annotated[str | None, typer.Option(
        "--hostname", "-n", help="Node name (default parley@%h-<pid>: distinct for each "
        "worker of a host)")] = None,
    events: Annotated[bool | None, typer.Option(
        "--task-events/--no-task-events", "-E",
        help="Send task events for Flower and celery events (default "
             "PARLEY_WORKER_TASK_EVENTS, off); --no-task-events also stops heartbeats")] = None,
    loglevel: Annotated[str, typer.Option(help="Level of Celery's and other libraries' "
                                          "logs (parley's own: PARLEY_LOG_LEVEL)")] = "WARNING",
    health_port: HealthPort = None,
) -> None:
    """Run agent tasks (a Celery worker with an I/O-bound pool).

    Options parley does not know are passed to `celery worker` unchanged, e.g.
    `parley worker --autoscale 64,8 --max-memory-per-child 500000`."""
    with settings_that_work():
        settings = get_settings()
        configure_logging(settings.log_format, settings.log_level, loglevel)
        tracing.setup("worker", settings)
        # Importing the worker's app builds it from the settings: a bad one is reported here.
        from parley.workers.acp.config import acp_queues
        from parley.workers.app import app as celery_app
        from parley.workers.app import log_celery_notices, stopped_with
        from parley.workers.tools.mcp_config import read_mcp_config

        if settings.worker_mcp_config:  # its servers start with the worker; the file first
            read_mcp_config(settings.worker_mcp_config)
        # A worker that runs ACP profiles also takes their calls, on each profile's queue.
        queues = ",".join([queues, *acp_queues(settings.worker_acp_config)])

    silent = events is False  # asked for: no heartbeats either
    events = settings.worker_task_events if events is None else events
    celery_app.conf.worker_send_task_events = events
    # Celery's default node name is celery@<host>: two workers of one host would share it
    # (a warning, and Flower and inspect mix them up); the pid tells them apart.
    hostname = hostname or f"parley@%h-{os.getpid()}"
    monitoring = ["--hostname", hostname]
    # Heartbeats (one publish every 2 s) unless every event is refused: Flower turns task
    # events on by remote control and shows a worker without heartbeats as offline.
    monitoring += ["--task-events"] if events else []
    monitoring += ["--without-heartbeat"] if silent else []
    monitoring += [] if health_port is None else ["--health-port", str(health_port)]
    # In JSON mode Celery's banner (plain text on stdout) gives way to parley's own
    # start-up line, and its shutdown notices go through logging.
    quiet = resolve_format(settings.log_format) == "json"
    if quiet:
        log_celery_notices()
        structlog.get_logger("parley.worker").info(
            "worker_starting", queues=queues, pool=pool or settings.worker_pool,
            concurrency=concurrency or settings.worker_concurrency, hostname=hostname,
            task_events=events, broker=redact_url(settings.broker_url),
            redis=redact_url(settings.redis_url))
    try:
        celery_app.worker_main([
            *(["--quiet"] if quiet else []),
            "worker", "--queues", queues, "--pool", pool or settings.worker_pool,
            "--concurrency", str(concurrency or settings.worker_concurrency), *monitoring,
            "--loglevel", loglevel, "--without-gossip", "--without-mingle", *ctx.args,
        ])
    except click.ClickException as error:  # a passed-through option Celery does not know
        print(f"parley: celery worker: {error.format_message()}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    # worker_main drops the worker's exit code: an unrecoverable error (a health port asked
    # for and taken) must not exit 0.
    raise typer.Exit(max(stopped_with, default=0))


@app.command()
def health(
    host: Annotated[str | None, typer.Option(help="Where the process serves its checks "
                                             "(default PARLEY_HEALTH_HOST, on loopback)")] = None,
    port: Annotated[int | None, typer.Option(help="Its health port (default PARLEY_HEALTH_PORT, "
                                             "else 8701 then 8702)")] = None,
    ready: Annotated[bool, typer.Option("--ready", help="Ask whether it is ready (Redis "
                                        "and the broker answer), not only live")] = False,
) -> None:
    """Exec probe for a local coordinator or worker: exit 0 when it answers live (ready
    with --ready), 1 with one line saying why otherwise."""
    # kombu and prometheus_client (the checks' server side) load only for this command.
    from parley.shared.health import COORDINATOR_PORT, WORKER_PORT, probe, probe_host

    try:
        settings = get_settings()
    except ValidationError as error:
        print(f"parley: {describe_invalid(error)}", file=sys.stderr)
        raise typer.Exit(1) from None
    chosen = port or settings.health_port
    ports = [chosen] if chosen else [COORDINATOR_PORT, WORKER_PORT]
    ok, line = probe(probe_host(settings, host), ports, ready)
    print(line, file=sys.stdout if ok else sys.stderr)
    raise typer.Exit(0 if ok else 1)


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Address to listen on (default "
                                             "PARLEY_API_HOST, 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default PARLEY_API_PORT, 8700)")
                    ] = None,
) -> None:
    """Serve the HTTP API and the dashboard (until SIGTERM). Without PARLEY_API_TOKENS it
    listens on loopback only."""
    # FastAPI and uvicorn load only for this command.
    from parley.api.access import read_tokens_file
    from parley.api.server import check_bind, serve

    with settings_that_work():
        settings = get_settings()
        host = settings.api_host if host is None else host
        redis_kwargs(settings)  # checks the TLS settings before anything connects
        check_bind(settings, host)
        if settings.api_tokens_file:
            read_tokens_file(settings.api_tokens_file)  # a bad file: one line, exit 1
    configure_logging(settings.log_format, settings.log_level)
    tracing.setup("api", settings)
    serve(settings, host, settings.api_port if port is None else port)
