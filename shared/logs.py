"""Logging for every parley process, in one place: parley's own events through structlog,
and everything else that logs through the standard library (Celery, kombu, uvicorn,
litellm, redis, warnings) through structlog's stdlib bridge, so that in JSON mode every
line a process writes is one JSON object.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

import structlog
from structlog.stdlib import ProcessorFormatter

from parley.shared.tracing import add_trace_ids

# The stdlib logger above every structlog logger of parley ("parley.turn", "parley.worker").
PARLEY_LOGGER = "parley"
# Marks the handler configure_logging installs, so that a second call replaces it.
HANDLER_MARK = "parley_handler"


def resolve_format(log_format: str) -> str:
    """``json`` or ``console``: ``auto`` is console on a terminal, JSON otherwise."""
    if log_format == "auto":
        return "console" if sys.stderr.isatty() else "json"
    return log_format


def configure_logging(log_format: str = "auto", level: str = "INFO",
                      libraries_level: str | None = None) -> None:
    """Configure structlog and stdlib logging for this process: one handler on the root
    logger, writing to stderr, renders parley's events and every library's records alike.

    Parley's events are kept at ``level``, the libraries' at ``libraries_level`` (default
    the same). Room id, turn and epoch reach every line through ``structlog.contextvars``:
    each room's asyncio task binds them in its own context. Call it before starting a
    server (uvicorn with ``log_config=None``, a Celery worker): their loggers then
    propagate here.
    """
    as_json = resolve_format(log_format) == "json"
    stamped: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,  # trace_id and span_id while a span is current
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*stamped, ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Not cached: tests re-configure structlog (capture_logs) after loggers were used.
        cache_logger_on_first_use=False,
    )
    renderer: list[structlog.typing.Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()] if as_json
        else [structlog.dev.ConsoleRenderer()])
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ProcessorFormatter(
        foreign_pre_chain=stamped,
        processors=[ProcessorFormatter.remove_processors_meta, *renderer]))
    setattr(handler, HANDLER_MARK, True)
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not getattr(h, HANDLER_MARK, False)] + [handler]
    root.setLevel((libraries_level or level).upper())
    logging.getLogger(PARLEY_LOGGER).setLevel(level.upper())
    logging.captureWarnings(True)
    if as_json:
        sys.excepthook = log_uncaught
        threading.excepthook = log_uncaught_in_thread


def route_to_root(*names: str) -> None:
    """Send these loggers' records through the root handler instead of handlers of their
    own (litellm installs plain-text stream handlers at import). The filters of the
    handlers removed (litellm's secret redaction) move to the logger, so they still apply."""
    for name in names:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            for record_filter in handler.filters:
                logger.addFilter(record_filter)
            logger.removeHandler(handler)
        logger.propagate = True


def log_uncaught(kind: type[BaseException], error: BaseException,
                 traceback: TracebackType | None) -> None:
    """An exception nothing caught, as one log event with its traceback."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, traceback)
        return
    structlog.get_logger(PARLEY_LOGGER).critical("uncaught_exception",
                                                 exc_info=(kind, error, traceback))


def log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    """An exception that ended a thread, as one log event naming the thread."""
    if args.exc_value is None or args.exc_type is SystemExit:
        return
    thread = args.thread.name if args.thread else "?"
    structlog.get_logger(PARLEY_LOGGER).critical(
        "uncaught_exception", thread=thread,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def one_line(text: str, most_chars: int | None = None) -> str:
    """``text`` on one line: every run of whitespace, line breaks included, as one space;
    cut to ``most_chars`` with a trailing ``...`` when given and longer."""
    line = " ".join(text.split())
    if most_chars is None or len(line) <= most_chars:
        return line
    return line[: most_chars - 3] + "..."


class RepeatLimit(logging.Filter):
    """Lets through at most one warning or error a ``interval_s`` of each kind (logger,
    level and message, a structlog event's name): a failure repeated in a loop, or by every
    one of a thousand connections, writes one line a second, which tells how many like it
    were left out since the last. Info and debug records all pass."""

    def __init__(self, interval_s: float = 1.0, kinds_max: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.kinds_max = kinds_max
        self.clock = clock
        self.lock = threading.Lock()
        self.last: dict[tuple[str, int, str], float] = {}
        self.left_out: dict[tuple[str, int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a repeat within the interval; the next one let through says how many."""
        if record.levelno < logging.WARNING:
            return True
        message = record.msg.get("event", "") if isinstance(record.msg, dict) else record.msg
        kind = (record.name, record.levelno, str(message))
        now = self.clock()
        with self.lock:
            if now - self.last.get(kind, -self.interval_s) < self.interval_s:
                self.left_out[kind] = self.left_out.get(kind, 0) + 1
                return False
            if len(self.last) >= self.kinds_max:  # bounded: forget the oldest kinds
                self.last = dict(sorted(self.last.items(), key=lambda item: item[1])
                                 [self.kinds_max // 2:])
            self.last[kind] = now
            repeats = self.left_out.pop(kind, 0)
        if repeats:
            note_repeats(record, repeats)
        return True


def note_repeats(record: logging.LogRecord, repeats: int) -> None:
    """Add to ``record`` how many records like it were left out."""
    if isinstance(record.msg, dict):
        record.msg = {**record.msg, "repeats_left_out": repeats}
    else:
        record.msg = f"{record.msg} [{repeats} more like this left out]"


def limit_repeats(interval_s: float = 1.0) -> None:
    """Put a RepeatLimit on parley's log handler (configure_logging's) of this process."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, HANDLER_MARK, False):
            handler.addFilter(RepeatLimit(interval_s))
