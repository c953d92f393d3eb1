"""Which API bases may receive a worker's key: URL prefixes, compared on their normalised
scheme, host, port and path.

=========================================  =======================================================
rule                                        so that
=========================================  =======================================================
scheme, host and port must be equal         ``https://api.example.com.evil.net`` and
                                            ``http://api.example.com`` are not
                                            ``https://api.example.com``
host and scheme ignore case; a default      ``HTTPS://API.Example.com:443/`` is
port, a trailing dot or slash is dropped    ``https://api.example.com``
the path must start with the prefix's       ``/v1`` allows ``/v1/chat`` but not ``/v10`` or
path, whole segments at a time              ``/v1/../admin``
anything two URL parsers could read         userinfo (``a@b``), backslashes, whitespace, percent-
differently never matches                   escapes or non-ASCII in the host, ``.``/``..`` segments
=========================================  =======================================================

Matching fails closed: a URL that cannot be normalised is never allowed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# What only a confused parser would accept: the same URL must mean one host to every client.
_AMBIGUOUS = re.compile(r"[\s\\\x00-\x1f\x7f]")


class ApiBase(NamedTuple):
    """A normalised http(s) URL: what decides where a request (and its key) goes."""

    scheme: str
    host: str
    port: int
    path: tuple[str, ...]

    def __str__(self) -> str:
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{port}/{'/'.join(self.path)}".rstrip("/")

    def covers(self, other: ApiBase) -> bool:
        """True when ``other`` is this prefix or lies under it."""
        return (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port) \
            and other.path[:len(self.path)] == self.path


def parse_api_base(url: str) -> ApiBase:
    """Normalise an http(s) URL; ValueError naming what is wrong when it cannot be."""
    if _AMBIGUOUS.search(url):
        raise ValueError(f"{url!r}: whitespace, control characters and backslashes are not "
                         "allowed in an API base")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    if "@" in parts.netloc:
        raise ValueError(f"{url!r}: credentials (user@) do not belong in an API base")
    return ApiBase(scheme, _host(url, parts.hostname), _port(url, parts), _path(url, parts.path))


def is_allowed_base(url: str, allowed: Iterable[str]) -> bool:
    """True when ``url`` lies under one of the ``allowed`` prefixes; False for any URL that
    cannot be normalised, and for prefixes that cannot be."""
    try:
        base = parse_api_base(url)
    except ValueError:
        return False
    for prefix in allowed:
        try:
            if parse_api_base(prefix).covers(base):
                return True
        except ValueError:
            continue
    return False


def display_base(url: str) -> str:
    """The URL as normalised, for error messages (no userinfo, query or fragment), or a
    placeholder when it cannot be normalised."""
    try:
        return str(parse_api_base(url))
    except ValueError:
        return "(an api_base that is not a plain http(s) URL)"


def _host(url: str, hostname: str | None) -> str:
    if not hostname:
        raise ValueError(f"{url!r} has no host")
    if ":" in hostname:
        try:
            return str(ipaddress.IPv6Address(hostname))
        except ValueError:
            raise ValueError(f"{url!r}: {hostname!r} is not an IPv6 address") from None
    host = hostname[:-1] if hostname.endswith(".") else hostname
    if not _HOSTNAME.fullmatch(host):
        raise ValueError(f"{url!r}: the host must be plain ASCII letters, digits, '-' and '.'")
    return host


def _port(url: str, parts) -> int:  # noqa: ANN001 - a urllib SplitResult
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} has an invalid port") from None
    return port if port is not None else DEFAULT_PORTS[parts.scheme.lower()]


def _path(url: str, path: str) -> tuple[str, ...]:
    segments = tuple(segment for segment in unquote(path).split("/") if segment)
    if any(segment in (".", "..") for segment in segments):
        raise ValueError(f"{url!r}: '.' and '..' segments are not allowed in an API base")
    return segments
