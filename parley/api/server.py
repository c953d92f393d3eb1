"""Running the API: ``parley api`` checks where it may listen, says how it is secured, and
serves the app with uvicorn (its logs through parley's logging configuration)."""

from __future__ import annotations

import logging
from typing import Any

import structlog
import uvicorn

from parley.api.app import make_app
from parley.api.connections import BACKLOG, ConnectionLimits, fit_open_files, guarded_protocol
from parley.api.guards import is_loopback
from parley.shared.logs import limit_repeats
from parley.shared.settings import Settings, redact_query

log = structlog.get_logger("parley.api")
# Open event streams never end by themselves: a stop waits this long for them.
SHUTDOWN_GRACE_S = 3
__all__ = ["check_bind", "is_loopback", "serve"]


def check_bind(settings: Settings, host: str) -> None:
    """ValueError (one line) when ``host`` is not loopback and no token is configured."""
    if not settings.api_tokens and not settings.api_tokens_file and not is_loopback(host):
        raise ValueError(f"refusing to serve the API on {host}: neither PARLEY_API_TOKENS nor "
                         "PARLEY_API_TOKENS_FILE is set, "
                         "and without tokens the API listens on loopback only (set tokens, "
                         "or use --host 127.0.0.1)")


class RedactTokens(logging.Filter):
    """Masks a token given in a request's query (``?access_token=``, which the event
    streams take, in any spelling: percent-encoded, after ``;``) in uvicorn's access log
    lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's path argument; keep every record."""
        if isinstance(record.args, tuple) and len(record.args) >= 3:
            args = list(record.args)
            args[2] = redact_query(str(args[2]))
            record.args = tuple(args)
        return True


def connection_limits(settings: Settings) -> ConnectionLimits:
    """The connections' limits from ``settings``, the cap lowered (and said so) when the
    open-file limit cannot hold it."""
    fitted = fit_open_files(settings.api_max_connections)
    if fitted < settings.api_max_connections:
        log.warning("PARLEY_API_MAX_CONNECTIONS lowered to fit the open-file limit (ulimit -n)",
                    asked=settings.api_max_connections, serving=fitted)
    return ConnectionLimits(keep_alive_s=settings.api_keep_alive_s,
                            header_timeout_s=settings.api_header_timeout_s,
                            body_timeout_s=settings.api_body_timeout_s, max_connections=fitted)


def serve(settings: Settings, host: str, port: int) -> None:
    """Serve the API on ``host:port`` until SIGTERM or SIGINT."""
    check_bind(settings, host)
    app = make_app(settings)
    app.state.identities.install_sighup()
    logging.getLogger("uvicorn.access").addFilter(RedactTokens())
    # A failure repeated by every connection (or by the event loop, out of files) writes
    # one line a second, not one per connection.
    limit_repeats()
    limits = connection_limits(settings)
    if app.state.identities.required:
        log.info("api starting", host=host, port=port, auth="bearer",
                 tokens=len(settings.api_tokens), tokens_file=settings.api_tokens_file,
                 max_connections=limits.max_connections)
    else:
        log.warning("api starting unauthenticated: PARLEY_API_TOKENS is not set, so it "
                    "serves loopback only", host=host, port=port, auth="none",
                    max_connections=limits.max_connections)
    # uvicorn types the keep-alive as whole seconds, and only hands it to call_later.
    keep_alive: Any = settings.api_keep_alive_s
    uvicorn.run(app, host=host, port=port, log_config=None, http=guarded_protocol(limits),
                backlog=BACKLOG, timeout_keep_alive=keep_alive,
                timeout_graceful_shutdown=SHUTDOWN_GRACE_S, server_header=False)
