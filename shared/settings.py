"""The one settings object, read from the environment (``PARLEY_*``) once at start-up."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any
from urllib.parse import unquote_plus

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from parley.shared.api_bases import parse_api_base
from parley.shared.spec_limits import DEFAULT_MAX_AGENTS, MAX_SPEC_JSON_BYTES

# The variables a spec may name as an agent's api_key_env unless the operator says otherwise:
# the providers' usual key variables, never the workers' other secrets.
DEFAULT_WORKER_KEY_ENVS = (
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_API_KEY", "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "COHERE_API_KEY", "DEEPSEEK_API_KEY",
    "TOGETHERAI_API_KEY", "FIREWORKS_AI_API_KEY", "OPENROUTER_API_KEY", "PERPLEXITYAI_API_KEY",
    "XAI_API_KEY", "CEREBRAS_API_KEY", "DEEPINFRA_API_KEY",
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A Host header's name part: a DNS name, an IPv4 address, or an IPv6 one in brackets.
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")
ENV_PREFIX = "PARLEY_"
# Read from the directory a process starts in, when there is one. Variables set in the
# environment win over the file's; the file sets PARLEY_* settings only (a provider key
# written there is not lent to agents: workers read keys from their environment).
ENV_FILE = ".env"


def variable_name(field: str) -> str:
    """The environment variable that sets the setting ``field``: ``PARLEY_<FIELD>``."""
    return f"{ENV_PREFIX}{field.upper()}"


class Settings(BaseSettings):
    """Process-wide configuration, from ``PARLEY_*`` environment variables and the
    ``.env`` file of the working directory. Units are in the names; defaults live only
    here."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_file=ENV_FILE,
                                      env_file_encoding="utf-8")

    redis_url: str = "redis://127.0.0.1:6379/0"
    broker_url: str = Field(default="", description="Celery broker; empty means redis_url")
    # redis_url names one node of a Redis Cluster (the others are discovered); the broker
    # must then be a plain Redis or RabbitMQ: Celery's Redis transport does not speak Cluster.
    redis_cluster: bool = False
    key_prefix: str = "parley"

    lease_ttl_s: float = Field(default=5.0, gt=0)
    # 0 means ttl/3: a room survives one missed renewal and is dropped after two.
    lease_renew_s: float = Field(default=0.0, ge=0)
    scan_interval_s: float = Field(default=0.2, gt=0)
    coordinator_capacity: int = Field(default=1000, ge=1)
    # For benchmarks and tests only: SIGUSR1 makes a coordinator collect all its garbage at
    # once (a full collection of its heap) and SIGUSR2 holds its event loop's thread busy
    # for coordinator_debug_busy_s, both on its main thread.
    coordinator_debug_signals: bool = False
    coordinator_debug_busy_s: float = Field(default=2.0, gt=0, le=60)
    # Calls per Celery message, per queue: a turn of up to 20 agents is one message, at load
    # several rooms' calls share one (coordinator/outbox.py); bigger rooms spread over workers.
    agents_per_task: int = Field(default=20, ge=1)
    # The most agents a new room may have: a turn's work grows with them (rooms created
    # under a higher bound stay readable when it is lowered).
    max_agents: int = Field(default=DEFAULT_MAX_AGENTS, ge=2)

    # Modules of @parley.tool functions the workers offer (comma-separated import paths),
    # and the MCP servers' JSON config file ({"mcpServers": {...}}): only the workers'
    # operator defines tools.
    worker_tools: Annotated[tuple[str, ...], NoDecode] = ()
    worker_mcp_config: str = ""
    # The ACP agent profiles' JSON file ({"agents": {"<profile>": {"command": [...], ...}}}):
    # only the workers' operator says which external agents run and how (model: acp/<profile>).
    worker_acp_config: str = ""
    # An ACP session that took no turn for this long is closed (its process ends); the
    # room's next turn starts a new one with the room's recent history.
    acp_idle_s: float = Field(default=600.0, gt=0, le=86_400)
    # How many of the room's last messages a new ACP session is sent first.
    acp_history_messages: int = Field(default=20, ge=1, le=1000)
    # A tool's result is cut to this before any model reads it.
    tool_result_max_bytes: int = Field(default=16_384, ge=256)
    # A background task's worker refreshes its heartbeat this often; a task whose heartbeat
    # is three of these old (its worker died) is failed by the room's coordinator.
    task_heartbeat_s: float = Field(default=2.0, gt=0, le=300)
    # A background task's result is cut to this before it is handed back.
    task_result_max_bytes: int = Field(default=32_768, ge=256)
    # A room keeps this many finished tasks (their records and results); past it the
    # oldest handed back go, trimmed by the script that finishes a task. Open ones stay.
    task_finished_max: int = Field(default=200, ge=1)
    # A worker publishes the tools it offers to Redis this often; its offer expires after
    # three intervals without one (a worker killed is out of the catalog that soon).
    worker_catalog_interval_s: float = Field(default=5.0, gt=0, le=300)

    worker_pool: str = "threads"
    worker_concurrency: int = Field(default=64, ge=1)
    worker_preload_litellm: bool = True
    task_visibility_timeout_s: float = Field(default=300.0, gt=0)

    # Bounded memory per room: every per-room stream but the log (the conversation itself,
    # never trimmed) is capped, approximately (Redis may keep up to one stream node, 100
    # entries, more). A turn record of 16 agents with 1,500-character drafts is about
    # 29 KB, a bid about 1.9 KB (python -m benchmarks.stream_sizes): at these defaults a
    # busy 16-agent room's capped streams stay under about 40 MB. The bids stream must hold
    # a whole turn's bids: keep it above twice the largest room's agents.
    bids_stream_maxlen: int = Field(default=2000, ge=100)
    turns_stream_maxlen: int = Field(default=1000, ge=100)
    dead_letter_stream_maxlen: int = Field(default=100, ge=10)
    # Followers read the events stream as it is written and need only its recent entries:
    # a 16-agent turn writes 19 events of about 120 bytes, so the default holds about 500
    # such turns in about 1.2 MB (python -m benchmarks.stream_sizes).
    events_stream_maxlen: int = Field(default=10_000, ge=100)
    # The tool journal's records per room (each tool call's start and result, each model
    # step's tool calls): a call asked again within this many replays instead of running.
    tool_journal_maxlen: int = Field(default=1000, ge=100)
    # The log is the conversation itself: never trimmed unless this is set (0 = never).
    # When set, the oldest messages fall out past about this many; `parley rooms archive
    # --keep` saves a room's log first.
    log_stream_maxlen: int = Field(default=0, ge=0)
    # Rooms with no run in progress, no lease and no post waiting are deleted by the
    # coordinators this long after their last activity (0 = never).
    room_idle_expiry_s: float = Field(default=0.0, ge=0)
    # A dead letter keeps at most 16 of the entry's fields, each cut to this many bytes.
    dead_letter_value_max_bytes: int = Field(default=1024, ge=64)
    # Posts longer than this are refused by the client and set aside by the coordinator.
    message_max_bytes: int = Field(default=65_536, ge=1024)
    # A room whose takes fail this many times in a row (not a lost lease, not an outage)
    # ends failed with stop_reason room_error instead of being retried forever.
    room_max_errors: int = Field(default=3, ge=1)

    log_format: str = Field(default="auto", pattern="^(auto|json|console)$")
    log_level: str = "INFO"

    # OpenTelemetry: "otlp" exports every process's spans over OTLP, configured by the
    # standard OTEL_* variables (an OTEL_EXPORTER_OTLP_ENDPOINT set turns it on as well);
    # "off" makes no span at all. Message text and prompts reach spans only with
    # trace_content (the GenAI conventions' opt-in). trace_url links a turn to its trace
    # in the dashboard: a template with {trace_id}, https://tempo.example/trace/{trace_id}.
    tracing: str = Field(default="off", pattern="^(off|otlp)$")
    trace_content: bool = False
    trace_url: str = ""

    # The coordinator's and the worker's HTTP health checks and metrics (/livez, /readyz,
    # /metrics). Unset: each process's default port (8701 coordinator, 8702 worker); 0: off.
    health_port: int | None = Field(default=None, ge=0, le=65535)
    # 0.0.0.0 in a container, so that the orchestrator's probes and Prometheus reach it.
    health_host: str = "127.0.0.1"
    # Workers send task events (Flower, `celery events`): three more publishes per task, so
    # off by default; Flower turns them on by remote control, `parley worker -E` at start.
    worker_task_events: bool = False

    # After losing Redis or the broker, workers try again at most this long apart (Celery's
    # own backoff grows to 30 s): a worker is back within about this long of an outage's end.
    worker_reconnect_max_s: float = Field(default=1.0, gt=0, le=30)

    # Which of a worker's secrets a spec can reach, and where they may go. Both are read from
    # the environment as comma-separated lists.
    worker_key_envs: Annotated[tuple[str, ...], NoDecode] = DEFAULT_WORKER_KEY_ENVS
    # URL prefixes (scheme://host[:port][/path]) that may receive a key; a provider's default
    # endpoint (an agent without api_base) always may.
    worker_allowed_api_bases: Annotated[tuple[str, ...], NoDecode] = ()
    # TLS for rediss:// URLs (Redis and the broker): certificates are always verified, against
    # this CA bundle when given, else the system's; the client certificate and key are for
    # servers that ask for one.
    redis_tls_ca_file: str = ""
    redis_tls_cert_file: str = ""
    redis_tls_key_file: str = ""

    # The HTTP API (``parley api``): where it listens by default, the bearer tokens it
    # accepts (comma-separated; none: it serves loopback only, unauthenticated) and the
    # largest request body it reads (a room spec's stored JSON may be 2 MiB).
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8700, ge=1, le=65535)
    api_tokens: Annotated[tuple[str, ...], NoDecode] = ()
    api_max_body_bytes: int = Field(default=MAX_SPEC_JSON_BYTES, ge=1024)
    # A YAML or JSON file of tokens (by SHA-256 digest), each with its organization and role,
    # and the organizations' limits (docs/operations/multi-tenancy.md); read again on SIGHUP
    # and when it changes. api_tokens stay cluster-admin tokens beside it.
    api_tokens_file: str | None = None
    # Host header values the API answers besides loopback names (comma-separated). Empty:
    # without tokens loopback names only (a page cannot rebind its own name onto the API);
    # with tokens any.
    api_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    # A connection is closed when it sits idle this long, before its first request as after
    # each answer; a request's head must be whole within api_header_timeout_s of the
    # connection opening or of the previous answer, and its body within api_body_timeout_s
    # of its head (else 408 and close).
    api_keep_alive_s: float = Field(default=5.0, gt=0)
    api_header_timeout_s: float = Field(default=10.0, gt=0)
    api_body_timeout_s: float = Field(default=30.0, gt=0)
    # Connections served at once; one more is answered 503 and closed. Lowered at start-up
    # when the process's open-file limit could not hold them.
    api_max_connections: int = Field(default=1000, ge=1)

    @field_validator("worker_key_envs", "worker_allowed_api_bases", "api_tokens",
                     "api_allowed_hosts", "worker_tools", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @field_validator("worker_key_envs")
    @classmethod
    def _env_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"PARLEY_WORKER_KEY_ENVS: {name!r} is not an environment "
                                 "variable name (letters, digits and '_')")
        return names

    @field_validator("worker_allowed_api_bases")
    @classmethod
    def _api_base_prefixes(cls, bases: tuple[str, ...]) -> tuple[str, ...]:
        for base in bases:
            try:
                parse_api_base(base)
            except ValueError as error:
                raise ValueError(f"PARLEY_WORKER_ALLOWED_API_BASES: {error}") from None
        return bases

    @field_validator("api_allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for host in hosts:
            if not _HOST_NAME.fullmatch(host):
                raise ValueError(f"PARLEY_API_ALLOWED_HOSTS: {host!r} is not a host name or "
                                 "address (no scheme, port or path: api.example.com, 10.0.0.5)")
        return tuple(host.lower().strip("[]") for host in hosts)

    @field_validator("key_prefix")
    @classmethod
    def _no_hash_tag(cls, prefix: str) -> str:
        if "{" in prefix or "}" in prefix:
            raise ValueError("must not hold { or }: each room's keys take the room as their "
                             "hash tag")
        return prefix

    @field_validator("log_stream_maxlen")
    @classmethod
    def _log_cap(cls, cap: int) -> int:
        if 0 < cap < 100:
            raise ValueError("must be 0 (never trimmed) or at least 100: trimming is by "
                             "stream node, about 100 entries")
        return cap

    @model_validator(mode="after")
    def _default_broker(self) -> Settings:
        if not self.broker_url:
            if self.redis_cluster:
                raise ValueError(f"{variable_name('redis_cluster')} is set: set "
                                 f"{variable_name('broker_url')} to a plain Redis or RabbitMQ "
                                 "(Celery's Redis transport does not speak Cluster)")
            self.broker_url = self.redis_url
        return self

    @model_validator(mode="after")
    def _renew_well_within_ttl(self) -> Settings:
        if self.lease_renew_s * 2 >= self.lease_ttl_s:
            raise ValueError(f"{variable_name('lease_renew_s')} must be under half of "
                             f"{variable_name('lease_ttl_s')} (0 means a third of it)")
        return self

    @property
    def lease_renew_every_s(self) -> float:
        """How often held leases are renewed: ``lease_renew_s``, or ttl/3 when it is 0."""
        return self.lease_renew_s or self.lease_ttl_s / 3


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings()


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# Query parameters that carry a credential (redis-py reads password and ssl_password there),
# by their name read percent-decoded; ";" starts a parameter as "&" does.
_QUERY_NAME = re.compile(r"[?&;]([^=?&;#]*)=")
_SECRET_NAME = re.compile(r"password|passwd|secret|token", re.IGNORECASE)
_VALUE_END = re.compile(r"[&#]")
MASK = "***"


def redact_url(url: str) -> str:
    """``url`` with its password masked, for printing and logging: ``redis://:***@host``,
    ``amqp://user:***@host``, and credential query values (``?password=***``). The user
    name, host, port and path stay readable. Text that is not a URL is returned as it is.

    The mask runs to the last ``@``: a password holding an unescaped ``@``, ``/``, ``?`` or
    ``#`` is masked whole (an ``@`` later in the query masks too much, never too little).
    """
    scheme = _SCHEME.match(url)
    if scheme is None:
        return url
    head, rest = scheme.group(), url[scheme.end():]
    at = rest.rfind("@")
    if at >= 0:
        user, colon, password = rest[:at].partition(":")
        if colon and password:
            rest = f"{user}:{MASK}{rest[at:]}"
    return head + redact_query(rest)


def redact_query(text: str) -> str:
    """``text`` (a URL's rest, a request path) with credential query values masked:
    ``/events?access_token=***``, ``?access%5Ftoken=***``, ``?a=1;token=***``. A masked
    value runs to the next ``&`` or ``#``, as a query parser reads it."""
    kept: list[str] = []
    done = 0
    for name in _QUERY_NAME.finditer(text):
        if name.start() < done or not _SECRET_NAME.search(unquote_plus(name.group(1))):
            continue
        value_end = _VALUE_END.search(text, name.end())
        kept += [text[done:name.end()], MASK]
        done = value_end.start() if value_end else len(text)
    return "".join(kept) + text[done:]
