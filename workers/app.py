"""The workers' Celery app. Start it with ``parley worker``."""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import celery.apps.worker
import click
import kombu
import kombu.transport.redis
import redis
import structlog
from celery import Celery, bootsteps
from celery.app.amqp import AMQP
from celery.signals import setup_logging, worker_ready, worker_shutdown, worker_shutting_down

from parley.shared.connections import broker_use_ssl
from parley.shared.health import (
    WORKER_PORT,
    HealthPortError,
    HealthServer,
    Liveness,
    Probes,
    readiness_checks,
    start_health_server,
)
from parley.shared.keys import Keys
from parley.shared.litellm_env import use_local_cost_map
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.settings import Settings, get_settings
from parley.workers.acp.config import AcpConfigError, read_acp_config
from parley.workers.deadlines import STOPPING
from parley.workers.tools.base import ToolDef
from parley.workers.tools.catalog_publisher import CatalogPublisher, catalog_client
from parley.workers.tools.mcp_config import McpConfigError
from parley.workers.tools.python_tools import ToolLoadError
from parley.workers.tools.toolbox import build_toolbox

if TYPE_CHECKING:
    from parley.workers.acp.sessions import AcpSessions, SessionKey

log = structlog.get_logger("parley.worker")
# The exit code of a worker whose health port cannot be served: bad input, as the CLI's.
EXIT_BAD_HEALTH_PORT = 2
# The exit code of a worker whose tools cannot be offered (PARLEY_WORKER_TOOLS): bad input.
EXIT_BAD_TOOLS = 2

# The consumer's loop ticks the worker's liveness this often; it is not live once a tick
# is this late (a live consumer loop never blocks that long).
LIVENESS_TICK_S = 1.0
LIVE_ROUNDS_S = 30.0
# The worker's liveness: ticked from the Celery consumer's own loop (ConsumerLiveness).
consumer_liveness = Liveness(LIVE_ROUNDS_S, connecting=True)
# The exit codes the worker stopped with, for `parley worker` to exit with.
stopped_with: list[int] = []


class BrokerOutOfMemory(ConnectionError):
    """The broker's Redis refused a write for its maxmemory. Python's ConnectionError, an
    OSError: kombu and Celery take it for a lost connection, and redis-py does not (it
    would take a lost connection inside a watched transaction for a WatchError, and kombu
    would try that transaction again for as long as Redis stays full)."""


class FullRedisConnection(redis.Connection):
    """A broker connection that reports a Redis out of memory as a lost connection.

    A full Redis (maxmemory reached, noeviction) refuses the late ack of a task (kombu's
    ZREM of its unacked index, in a MULTI) and the delivery of the next with OOM. kombu
    calls that a channel error, which Celery's consumer treats as unrecoverable: the worker
    exits. As a connection error it is an outage, which Celery rides out: the consumer
    reconnects at the reconnect intervals until Redis takes writes again. The connection
    is closed first: a MULTI cut short leaves replies unread on it.
    """

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """Redis's reply; an OOM refusal raised as BrokerOutOfMemory."""
        try:
            return super().read_response(*args, **kwargs)
        except redis.OutOfMemoryError as error:
            self.disconnect()
            raise BrokerOutOfMemory(f"the broker's Redis is out of memory (maxmemory): "
                                    f"{error}") from error


class RedisTransport(kombu.transport.redis.Transport):
    """kombu's Redis transport, but a channel whose connection is already closed reports
    a connection error, not an AttributeError, and so does a full Redis
    (FullRedisConnection).

    When Redis restarts while a task runs, the task's late ack and the restore of unacked
    messages at channel close both run against the closed connection. Celery logs a
    connection error there and reconnects; an AttributeError is "unrecoverable" and stops
    the worker. The message stays unacknowledged and expires as any other stale one.
    """

    class Channel(kombu.transport.redis.Channel):
        """A Redis channel that knows when its connection has gone."""

        connection_class = FullRedisConnection

        def _connparams(self, asynchronous: bool = False) -> dict:
            if self.connection is None or self.connection.client is None:
                raise redis.ConnectionError("this channel's broker connection is closed")
            return super()._connparams(asynchronous=asynchronous)


# kombu.Connection.ensure_connection's arguments, in order.
ENSURE_CONNECTION_ARGS = ("errback", "max_retries", "interval_start", "interval_step",
                          "interval_max")
RECONNECT_INTERVALS = ("interval_start", "interval_step", "interval_max")


class BrokerConnection(kombu.Connection):
    """A broker connection that reconnects at the transport options' intervals wherever
    its caller names none.

    Celery's consumer reconnects to a lost broker at kombu's defaults, whatever the
    transport options say: 2 s after the first failure, then 4, 6 ... up to 30 s apart.
    A worker would come back up to 30 s after its broker did, and every turn in flight
    meanwhile would time out.
    """

    def ensure_connection(self, *args: Any, **kwargs: Any) -> BrokerConnection:
        """kombu's ensure_connection, with the transport options' intervals as defaults."""
        named = set(ENSURE_CONNECTION_ARGS[:len(args)]) | set(kwargs)
        options: dict[str, Any] = self.transport_options or {}
        for name in RECONNECT_INTERVALS:
            if name not in named and name in options:
                kwargs[name] = options[name]
        return super().ensure_connection(*args, **kwargs)


class WorkerAMQP(AMQP):
    """Celery's messaging layer, on broker connections with bounded reconnect intervals."""

    Connection = BrokerConnection


def reconnect_intervals(max_s: float) -> dict[str, float]:
    """kombu's intervals between attempts to reach a lost broker: at once, then a fifth
    of ``max_s`` longer each time, up to ``max_s``."""
    return {"interval_start": 0.0, "interval_step": max_s / 5, "interval_max": max_s}


def broker_transport(broker_url: str) -> str | None:
    """The transport for the broker URL: ours for plain Redis, kombu's choice otherwise
    (``rediss://`` too: kombu turns TLS on from that scheme, which a named class skips)."""
    if broker_url.startswith("redis://"):
        return f"{__name__}:RedisTransport"
    return None


def make_app(settings: Settings) -> Celery:
    """The workers' Celery app, configured from ``settings`` alone: its broker (TLS
    included), how tasks are acknowledged, and how a lost broker is reconnected."""
    app = Celery("parley", broker=settings.broker_url,
                 include=["parley.workers.tasks", "parley.workers.background"],
                 amqp=f"{__name__}:WorkerAMQP")
    app.conf.update(
        # A rediss:// broker verifies the server's certificate (kombu alone would not); None
        # for redis://. Built with every other Redis client's TLS options, in
        # shared/connections.py.
        broker_use_ssl=broker_use_ssl(settings),
        task_default_queue=DEFAULT_QUEUE,
        # Acks late: the message of a task a killed worker was running stays unacknowledged;
        # the broker redelivers it after the visibility timeout, which is past the turn's
        # deadline, and the worker then drops it as expired instead of running it. The bids
        # the task had already written are kept; the others time out for that turn only.
        task_acks_late=True,
        # Not requeued when a pool process dies: an immediate redelivery, still before the
        # deadline, would pay again for the chunk's bids that had already arrived.
        task_reject_on_worker_lost=False,
        # On a lost broker connection running tasks are left to finish: their bids count if
        # they reach the rooms' Redis; their acks are lost and the redelivered copies expire.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        task_ignore_result=True,
        # Bids are written to Redis streams; Celery's result backend is never read.
        result_backend=None,
        worker_prefetch_multiplier=1,
        # Must exceed the longest bid_timeout_s of any room: a message redelivered before its
        # deadline would run a second time.
        broker_transport_options={"visibility_timeout": settings.task_visibility_timeout_s,
                                  # How soon a lost broker is tried again (see BrokerConnection).
                                  **reconnect_intervals(settings.worker_reconnect_max_s)},
        broker_transport=broker_transport(settings.broker_url),
        broker_connection_retry_on_startup=True,
        # Attempts this close together would use up Celery's default of 100 in under two
        # minutes and stop the worker: it waits for its broker however long an outage lasts.
        broker_connection_max_retries=None,
        worker_hijack_root_logger=False,
        # Task events and heartbeats for Flower, `celery events` and the dashboard;
        # `parley worker --no-task-events` turns them off.
        worker_send_task_events=settings.worker_task_events,
        # Publishing a task stays one message: coordinators send no task-sent events.
        task_send_sent_event=False,
    )
    app.steps["worker"].add(WorkerTools)
    app.steps["worker"].add(WorkerAcp)
    app.steps["worker"].add(WorkerHealth)
    app.steps["consumer"].add(ConsumerLiveness)
    app.user_options["worker"].add(click.Option(
        ["--health-port"], type=int, default=None,
        help=f"Serve /livez, /readyz and /metrics on this port (0: off; default {WORKER_PORT})"))
    return app


class WorkerTools(bootsteps.StartStopStep):
    """Loads the tools the worker offers as it starts: a tools module it cannot offer stops
    it with one line (exit 2), before it takes any task."""

    def start(self, worker: Any) -> None:
        """Build the worker's toolbox (kept for its whole life)."""
        try:
            build_toolbox(settings)
        except (ToolLoadError, McpConfigError) as error:
            print(f"parley: {error}", file=sys.__stderr__, flush=True)
            raise SystemExit(EXIT_BAD_TOOLS) from None

    def stop(self, worker: Any) -> None:
        """End the toolbox's sessions: its MCP servers' processes stop with the worker."""
        build_toolbox(settings).close()


# This worker's ACP sessions (one holder, once the worker starts).
_acp_sessions: list[AcpSessions] = []


def acp_sessions() -> AcpSessions:
    """The worker's ACP sessions, made on first use from its profiles file."""
    if not _acp_sessions:
        # Put off: the protocol's package takes a third of a worker's imports, and only a
        # worker running an ACP agent needs it.
        from parley.workers.acp.sessions import AcpSessions

        _acp_sessions.append(AcpSessions(read_acp_config(settings.worker_acp_config),
                                         settings.acp_idle_s, room_gone))
    return _acp_sessions[0]


def room_gone(key: SessionKey) -> bool:
    """True when the session's room was deleted (its spec is gone)."""
    prefix, room, _ = key
    return not _rooms_client().exists(Keys(prefix).spec(room))


@functools.cache
def _rooms_client() -> Any:
    return catalog_client(settings)


class WorkerAcp(bootsteps.StartStopStep):
    """Reads the worker's ACP profiles as it starts: a file it cannot use stops it with one
    line (exit 2); its sessions' processes end with the worker."""

    def start(self, worker: Any) -> None:
        """Check the profiles file (sessions start on their agents' first turns)."""
        try:
            read_acp_config(settings.worker_acp_config)
        except AcpConfigError as error:
            print(f"parley: {error}", file=sys.__stderr__, flush=True)
            raise SystemExit(EXIT_BAD_TOOLS) from None

    def stop(self, worker: Any) -> None:
        """End every session."""
        while _acp_sessions:
            _acp_sessions.pop().close_all()


class WorkerHealth(bootsteps.StartStopStep):
    """Serves the worker's /livez, /readyz and /metrics while the worker runs."""

    def __init__(self, worker: Any, health_port: int | None = None, **options: Any) -> None:
        super().__init__(worker, **options)
        self.port = health_port
        self.server: HealthServer | None = None

    def start(self, worker: Any) -> None:
        """Start serving; a prefork pool counts its answers where /metrics cannot see."""
        try:
            self.server = start_health_server(
                Probes(consumer_liveness, readiness_checks(settings)), settings, WORKER_PORT,
                self.port)
        except HealthPortError as error:
            # One line, as the coordinator says it, not Celery's "Unrecoverable error" trace;
            # on the real stderr, which Celery has redirected into its logger.
            print(f"parley: {error}", file=sys.__stderr__, flush=True)
            raise SystemExit(EXIT_BAD_HEALTH_PORT) from None
        if self.server is not None and "prefork" in getattr(worker.pool_cls, "__module__", ""):
            log.warning("metrics_need_threads_pool",
                        detail="answers, tokens and cost are counted in the pool's child "
                               "processes and are not in /metrics: run a threads or gevent pool")

    def stop(self, worker: Any) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.stop()
            self.server = None


class ConsumerLiveness(bootsteps.StartStopStep):
    """Ticks the worker's liveness from the consumer's timer, which runs in the consumer's
    own event loop: a consumer that hangs stops ticking. While it (re)connects to a lost
    broker it does not tick either, and counts as live (readiness says the broker is down)."""

    def __init__(self, consumer: Any, **options: Any) -> None:
        super().__init__(consumer, **options)
        self.ticking: Any = None

    def start(self, consumer: Any) -> None:
        """Tick every second once the consumer's loop runs."""
        consumer_liveness.reconnect()
        self.ticking = consumer.timer.call_repeatedly(LIVENESS_TICK_S, consumer_liveness.tick)

    def stop(self, consumer: Any) -> None:
        """The consumer stops, to reconnect or to shut down."""
        consumer_liveness.reconnect()
        if self.ticking is not None:
            self.ticking.cancel()
            self.ticking = None

    shutdown = stop


@worker_shutting_down.connect
def wake_waiting_calls(**_: object) -> None:
    """A shutting-down worker waits for its running tasks: their calls stop waiting (a
    script's sleep, a rate limit's backoff) so that it does not wait for those."""
    STOPPING.set()


@worker_shutdown.connect
def note_exit_code(sender: Any, **_: object) -> None:
    """Keep the code the worker stops with (Celery's worker_main does not return it)."""
    stopped_with.append(int(sender.exitcode or 0))


@setup_logging.connect
def leave_logging_to_parley(**_: object) -> None:
    """Celery configures no logging of its own: ``parley worker`` has called
    shared.logs.configure_logging, and Celery's loggers propagate to its handler. What
    Celery would still do, redirect stray prints to its logger, is kept (that handler
    writes to the stderr it was given, not to the redirected one)."""
    if app.conf.worker_redirect_stdouts:
        app.log.redirect_stdouts(app.conf.worker_redirect_stdouts_level)


def log_celery_notices() -> None:
    """Celery writes its shutdown notices ("worker: Warm shutdown (MainProcess)") straight
    to the stdout file descriptor; in JSON mode they go through logging instead."""
    notices = logging.getLogger("celery.apps.worker")

    def say(message: str, f: object = None) -> None:
        notices.warning(message.strip())

    celery.apps.worker.safe_say = say


# The settings this worker runs with, read once as it starts, and the app built from them:
# the one `parley worker` runs and workers.tasks registers its task on.
settings = get_settings()
app = make_app(settings)


@worker_ready.connect
def preload_litellm(**_: object) -> None:
    """Import litellm in the background: it takes seconds, and the first real call would
    otherwise pay for it inside its bid deadline. Scripted-only workers can skip it."""
    if settings.worker_preload_litellm:
        threading.Thread(target=_import_litellm, name="preload-litellm", daemon=True).start()


def _import_litellm() -> None:
    use_local_cost_map()
    import litellm  # noqa: F401 - the import is the point: it takes seconds


def offered_tools() -> list[ToolDef]:
    """The tools this worker offers its agents, as the catalog lists them (its toolbox,
    built as the worker started)."""
    return build_toolbox(settings).tools()


# The publishers of this worker's offer in the tool catalog (one, once the worker is ready).
catalog_publishers: list[CatalogPublisher] = []


def start_catalog_publisher(worker_id: str, tools: Callable[[], list[ToolDef]]
                            ) -> CatalogPublisher:
    """Publish ``tools()`` (and the ACP profiles this worker runs) as ``worker_id``'s offer
    in the tool catalog until the worker shuts down."""
    profiles = tuple(read_acp_config(settings.worker_acp_config).agents)
    publisher = CatalogPublisher(catalog_client(settings), Keys(settings.key_prefix), worker_id,
                                 tools, settings.worker_catalog_interval_s, profiles).start()
    catalog_publishers.append(publisher)
    return publisher


@worker_ready.connect
def publish_tool_catalog(sender: Any, **_: object) -> None:
    """Once the worker takes tasks, the catalog lists what it offers, under its node name."""
    start_catalog_publisher(sender.hostname, offered_tools)


@worker_shutdown.connect
def withdraw_tool_catalog(**_: object) -> None:
    """A worker that stops leaves the catalog at once (a killed one when its offer expires)."""
    while catalog_publishers:
        catalog_publishers.pop().stop()
