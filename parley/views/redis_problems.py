"""Why a Redis could not be used, in one line: for the CLI, the console and anything else
that tells a person. A leaf module: nothing imports the CLI to learn the wording."""

from __future__ import annotations

import ssl

import redis

from parley.shared.settings import redact_url


def caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    """True when ``error`` or any exception it was raised from or during is a ``kind``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def unreachable_redis(url: str, error: BaseException) -> str:
    """Why Redis at ``url`` could not be used, as one line: where (password masked), the
    error, and what to check. TLS is named when the URL asks for it (``rediss://``)."""
    reason = " ".join(str(error).split()) or type(error).__name__
    tls_trouble = caused_by(error, ssl.SSLError) or isinstance(error, redis.TimeoutError)
    if url.startswith("rediss://") and caused_by(error, ssl.SSLCertVerificationError):
        hint = ("the URL asks for TLS (rediss://) and the server's certificate was not "
                "accepted: give its CA in PARLEY_REDIS_TLS_CA_FILE (a PEM file)")
    elif url.startswith("rediss://") and tls_trouble:
        hint = ("the URL asks for TLS (rediss://): is the server speaking TLS on that port, "
                "and answering? A plain Redis needs redis://")
    elif isinstance(error, redis.TimeoutError):
        hint = ("it did not answer in time: is the server hung or overloaded, or "
                "PARLEY_REDIS_URL pointing at something that is not Redis?")
    else:
        hint = "start Redis or point PARLEY_REDIS_URL at one"
    return f"cannot reach Redis at {redact_url(url)} ({reason}); {hint}"
