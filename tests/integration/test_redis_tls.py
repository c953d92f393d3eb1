"""Redis over TLS against a private redis-server and a throwaway CA: every client parley
makes, the Celery broker included, verifies the server's certificate and host name."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu.exceptions import OperationalError

from parley.client import Client
from parley.coordinator.connections import connect
from parley.coordinator.transport import CeleryTransport
from parley.shared.settings import Settings
from tests.support.tls import Certificates, TlsRedis, make_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[TlsRedis]:
    with TlsRedis(tmp_path_factory.mktemp("redis"), certs) as running:
        yield running


def settings_for(url: str, certs: Certificates | None = None, client_cert: bool = False,
                 **fields) -> Settings:
    """Settings for Redis and broker at ``url``; the CA (and client certificate) if given."""
    if certs is not None:
        fields["redis_tls_ca_file"] = str(certs.ca)
    if certs is not None and client_cert:
        fields.update(redis_tls_cert_file=str(certs.client_cert),
                      redis_tls_key_file=str(certs.client_key))
    return Settings(redis_url=url, broker_url="", **fields)


def broker_ping(settings: Settings) -> bool:
    """Connect through the coordinator's Celery broker connection and PING."""
    transport = CeleryTransport(settings.broker_url, timeout_s=2, settings=settings)
    with transport.app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        return bool(connection.default_channel.client.ping())


async def coordinator_ping(settings: Settings) -> bool:
    client = connect(settings, 2)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


def test_every_client_connects_with_the_ca_file(server, certs):
    settings = settings_for(server.url(), certs)

    client = Client(settings)
    client.ping()
    assert client.redis.set("parley-tls-test", "ok") and client.redis.get("parley-tls-test")
    assert asyncio.run(coordinator_ping(settings))
    assert broker_ping(settings)


def test_the_broker_refuses_a_certificate_it_cannot_verify(server):
    # Without parley's options kombu would accept any certificate here (CERT_NONE).
    settings = settings_for(server.url())
    with pytest.raises(OperationalError, match="certificate verify failed"):
        broker_ping(settings)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        Client(settings).ping()


def test_a_host_name_the_certificate_does_not_name_is_refused(server, certs):
    settings = settings_for(server.url("127.0.0.1"), certs)
    with pytest.raises(OperationalError, match="certificate verify failed: IP address mismatch"):
        broker_ping(settings)
    with pytest.raises(redis.ConnectionError, match="IP address mismatch"):
        Client(settings).ping()


def test_a_server_that_asks_for_a_client_certificate_gets_it(tmp_path: Path, certs):
    with TlsRedis(tmp_path, certs, auth_clients="yes") as strict:
        with_cert = settings_for(strict.url(), certs, client_cert=True)
        Client(with_cert).ping()
        assert broker_ping(with_cert)
        assert asyncio.run(coordinator_ping(with_cert))
        with pytest.raises(redis.ConnectionError):
            Client(settings_for(strict.url(), certs)).ping()

