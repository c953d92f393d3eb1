"""TLS for every Redis connection parley makes, built from Settings in one place: the
redis-py clients of the CLI, the coordinators and the workers, and Celery's broker.

A ``rediss://`` URL always verifies the server's certificate and host name: against
PARLEY_REDIS_TLS_CA_FILE when it is set, else against the system's CAs. A client
certificate (PARLEY_REDIS_TLS_CERT_FILE, and PARLEY_REDIS_TLS_KEY_FILE unless the
certificate file holds the key) is sent to servers that ask for one. Left to themselves,
kombu would connect to a ``rediss://`` broker without verifying anything, and a URL query
(``?ssl_cert_reqs=none``) overrides the options of both redis-py and kombu; so TLS options
come from these settings only, and settings that cannot give a verified connection stop the
process with one line naming the setting to fix.
"""

from __future__ import annotations

import os
import ssl
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
import redis.asyncio

from parley.shared.settings import Settings

TLS_SCHEME = "rediss"
# The only TLS option a URL may carry: it asks for what parley does anyway.
_URL_TLS_ALLOWED = {"ssl_cert_reqs": {"required", "cert_required"}}
_FILE_SETTINGS = (("redis_tls_ca_file", "PARLEY_REDIS_TLS_CA_FILE", "ssl_ca_certs"),
                  ("redis_tls_cert_file", "PARLEY_REDIS_TLS_CERT_FILE", "ssl_certfile"),
                  ("redis_tls_key_file", "PARLEY_REDIS_TLS_KEY_FILE", "ssl_keyfile"))


class RedisTlsError(ValueError):
    """The Redis TLS settings cannot give a verified connection; names the setting to fix."""


def redis_kwargs(settings: Settings, url: str | None = None) -> dict[str, Any]:
    """redis-py keyword arguments for ``url`` (default: PARLEY_REDIS_URL), to pass to
    ``from_url`` with the client's own options: empty for a plain ``redis://`` URL."""
    url = settings.redis_url if url is None else url
    return tls_options(settings, url, setting_for(settings, url)) or {}


def cluster_client(settings: Settings, *, asyncio: bool = False, **options: Any) -> Any:
    """A Redis Cluster client (redis-py's, sync or asyncio) seeded by PARLEY_REDIS_URL, one
    node's address; ``options`` go to every node's connections. Every per-room key shares
    its room's slot, so each room's scripts and pipelines run on one node."""
    kind = redis.asyncio.RedisCluster if asyncio else redis.RedisCluster
    return kind.from_url(settings.redis_url, **options, **redis_kwargs(settings))


def broker_use_ssl(settings: Settings, url: str | None = None) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` for ``url`` (default: PARLEY_BROKER_URL): the same
    options for a ``rediss://`` broker, None (Celery's default) for any other."""
    url = settings.broker_url if url is None else url
    return tls_options(settings, url, setting_for(settings, url))


def tls_options(settings: Settings, url: str, setting: str) -> dict[str, Any] | None:
    """The verified-TLS options for ``url``, None when it does not use TLS. Raises
    RedisTlsError naming the setting when they cannot be built."""
    check_tls_files_are_used(settings)
    if urlsplit(url).scheme.lower() != TLS_SCHEME:
        return None
    check_url_leaves_tls_to_settings(url, setting)
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True}
    for field, name, option in _FILE_SETTINGS:
        path = getattr(settings, field)
        if path:
            options[option] = readable_file(path, name)
    if "ssl_keyfile" in options and "ssl_certfile" not in options:
        raise RedisTlsError("PARLEY_REDIS_TLS_KEY_FILE is set without "
                            "PARLEY_REDIS_TLS_CERT_FILE: set the client certificate it belongs to")
    return options


def check_tls_files_are_used(settings: Settings) -> None:
    """TLS files given for plain ``redis://`` URLs would be ignored: refuse instead."""
    given = [name for field, name, _ in _FILE_SETTINGS if getattr(settings, field)]
    urls = (settings.redis_url, settings.broker_url)
    if given and not any(urlsplit(url).scheme.lower() == TLS_SCHEME for url in urls):
        raise RedisTlsError(f"{given[0]} is set but neither PARLEY_REDIS_URL nor "
                            "PARLEY_BROKER_URL uses TLS: use a rediss:// URL")


def check_url_leaves_tls_to_settings(url: str, setting: str) -> None:
    """Refuse TLS options in the URL's query: they override the settings in redis-py and
    kombu alike, so ``?ssl_cert_reqs=none`` would quietly turn verification off."""
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name.lower().startswith("ssl") and value.lower() not in _URL_TLS_ALLOWED.get(
                name.lower(), set()):
            raise RedisTlsError(
                f"{setting} carries the TLS option {name}={value}: certificates are always "
                "verified; give PARLEY_REDIS_TLS_CA_FILE, PARLEY_REDIS_TLS_CERT_FILE and "
                "PARLEY_REDIS_TLS_KEY_FILE instead")


def readable_file(path: str, setting: str) -> str:
    """``path`` when it is a readable file; RedisTlsError naming ``setting`` otherwise."""
    if not os.path.isfile(path):
        raise RedisTlsError(f"{setting}={path}: no such file")
    if not os.access(path, os.R_OK):
        raise RedisTlsError(f"{setting}={path}: not readable by this process")
    return path


def setting_for(settings: Settings, url: str) -> str:
    """Which setting a URL came from, for error messages (never the URL: it may hold a
    password)."""
    return "PARLEY_REDIS_URL" if url == settings.redis_url else "PARLEY_BROKER_URL"
