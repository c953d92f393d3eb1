"""The API's outermost checks, before anything else reads a request, and the headers every
answer carries.

A browser runs any page's requests against any address it can reach, the API's loopback
one included, without asking the API first when the request looks like a form's (a
``text/plain`` body, no custom header), and a page can rebind its own name onto
127.0.0.1 to read the answers. So:

| refused | answer |
|---|---|
| both Content-Length and Transfer-Encoding (RFC 9112 §6.3: request smuggling) | 400, closed |
| a Host not served (DNS rebinding): served are loopback names, the names of | 421 |
| ``PARLEY_API_ALLOWED_HOSTS``, and with tokens and no such list any name | |
| without tokens: an Origin other than the API's own (a cross-site page) | 403 |
| without tokens: a body that is not ``application/json`` (a page's form) | 415 |

With tokens, a cross-site page cannot send one (browsers add no bearer token by
themselves), so Origin and content type are the routes' business.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api import metrics
from parley.api.errors import error_response

# Served by address (the orchestrators' probes): left out of the Host check when tokens
# guard the rest.
HEALTH_PATH = "/healthz"
JSON_TYPE = "application/json"
# Scripts, styles and requests from the page's own origin only; no framing, no plugins.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                           "form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def is_loopback(host: str) -> bool:
    """True when ``host`` (a name or an address, IPv6 in brackets or not) is loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """A Host header's name, lower case, without its port or an IPv6 address's brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def is_loopback_name(name: str) -> bool:
    """True for a name only this machine answers to: loopback addresses, ``localhost``
    and its subdomains (which browsers resolve to loopback themselves, RFC 6761)."""
    return is_loopback(name) or name.endswith(".localhost")


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (the first, decoded as latin-1), or None."""
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name),
                None)


class RequestGuard:
    """Refuses what the table of this module lists, each refusal JSON naming what is wrong
    and counted in ``parley_api_refused_total{reason}``."""

    def __init__(self, app: ASGIApp, tokens_required: bool, allowed_hosts: tuple[str, ...]
                 ) -> None:
        self.app = app
        self.tokens_required = tokens_required
        self.allowed_hosts = frozenset(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, reason, message = refusal
        metrics.REFUSED.labels(reason=reason).inc()
        # A request framed two ways may hide another behind it: nothing more is read.
        headers = {"Connection": "close"} if reason == "framing" else None
        await error_response(status, message, headers)(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """(status, reason, message) for a request to refuse, else None."""
        length, encoding = header(scope, b"content-length"), header(scope, b"transfer-encoding")
        if length is not None and encoding is not None:
            return 400, "framing", ("a request with both Content-Length and Transfer-Encoding "
                                    "is refused (RFC 9112 section 6.3)")
        host = header(scope, b"host")
        if not self.serves_host(host, scope["path"]):
            return 421, "host", self.host_message(host)
        if self.tokens_required:
            return None
        origin = header(scope, b"origin")
        if origin is not None and not same_origin(origin, host or ""):
            return 403, "origin", (f"Origin {origin!r} is not this API's: without "
                                   "PARLEY_API_TOKENS the API refuses cross-site requests")
        media_type = (header(scope, b"content-type") or "").partition(";")[0].strip().lower()
        if has_body(length, encoding) and media_type != JSON_TYPE:
            return 415, "content_type", (f"a request body must be JSON: send Content-Type: "
                                         f"{JSON_TYPE} (got {media_type or 'none'!r})")
        return None

    def serves_host(self, host: str | None, path: str) -> bool:
        """True when the API answers requests naming ``host``."""
        if self.tokens_required and (not self.allowed_hosts or path == HEALTH_PATH):
            return True
        name = host_name(host or "")
        return is_loopback_name(name) or name in self.allowed_hosts

    def host_message(self, host: str | None) -> str:
        """Why ``host`` is not served, and how to serve it."""
        which = ("the names of PARLEY_API_ALLOWED_HOSTS and loopback ones" if self.allowed_hosts
                 else "loopback names only (without PARLEY_API_TOKENS)")
        given = "no Host" if host is None else f"Host {host!r}"
        return (f"{given} is not served: this API answers {which}; add the name to "
                "PARLEY_API_ALLOWED_HOSTS to serve it")


def same_origin(origin: str, host: str) -> bool:
    """True when the ``Origin`` a browser sent is the API's own (``http(s)://`` and the
    request's Host); ``null`` (a sandboxed or local page) is not."""
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()


def has_body(length: str | None, encoding: str | None) -> bool:
    """True when the request declares a body (a length above 0, or chunks)."""
    return encoding is not None or (length is not None and length.strip() not in ("", "0"))


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer: the dashboard's page runs only its own
    scripts and styles, cannot be framed, and no answer is sniffed into another type."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
