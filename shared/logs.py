"""structlog set-up: JSON lines in production, readable lines on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(log_format: str = "auto", level: str = "INFO") -> None:
    """Configure structlog and stdlib logging once for this process.

    Room id, turn and epoch reach every line through ``structlog.contextvars``: each room's
    asyncio task binds them in its own context.
    """
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        # Not cached: tests re-configure structlog (capture_logs) after loggers were used.
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")


def one_line(text: str, most_chars: int | None = None) -> str:
    """``text`` on one line: every run of whitespace, line breaks included, as one space;
    cut to ``most_chars`` with a trailing ``...`` when given and longer."""
    line = " ".join(text.split())
    if most_chars is None or len(line) <= most_chars:
        return line
    return line[: most_chars - 3] + "..."
